package platform

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/danielgtaylor/huma/v2"
	"github.com/uptrace/bun"
)

// Module is the lifecycle every Keelson module shares, and what a host
// assembles (see Assembly):
//
//   - Register adds the module's operations to the caller's Huma API;
//   - Migrations are its tables, applied once by the host before any Start;
//   - Start begins its background work. ctx is the module's lifetime: it is
//     cancelled only after every module has closed, so work may hold it.
//   - Close stops that work, waiting for what is in flight until ctx ends. It
//     must be safe on a module that was never started, and a second time.
//
// Each module's package checks itself with var _ platform.Module = (*Service)(nil).
type Module interface {
	Register(api huma.API) error
	Migrations() MigrationSet
	Start(ctx context.Context) error
	Close(ctx context.Context) error
}

// Migration is one schema change of one module. Up must work on both dialects:
// prefer bun's query builders (NewCreateTable().Model(...)), or branch on
// db.IsPostgres for the rare dialect-specific statement.
type Migration struct {
	// ID is unique within the module and never changes once released, e.g. "0001_users".
	ID string
	Up func(ctx context.Context, db bun.IDB) error
}

// MigrationSet is what a module contributes: its name and its migrations in order.
type MigrationSet struct {
	Module     string
	Migrations []Migration
}

// Part is a Module made of functions, for a host's work that belongs to no
// module's service (a database handle to close, a listener to start). A nil
// field does nothing.
type Part struct {
	Routes  func(huma.API) error
	Schema  MigrationSet
	OnStart func(context.Context) error
	OnClose func(context.Context) error
}

var _ Module = Part{}

func (p Part) Register(api huma.API) error {
	if p.Routes == nil {
		return nil
	}
	return p.Routes(api)
}

func (p Part) Migrations() MigrationSet { return p.Schema }

func (p Part) Start(ctx context.Context) error {
	if p.OnStart == nil {
		return nil
	}
	return p.OnStart(ctx)
}

func (p Part) Close(ctx context.Context) error {
	if p.OnClose == nil {
		return nil
	}
	return p.OnClose(ctx)
}

// Migrator applies migration sets in order (db.Migrator gives one for a
// database handle).
type Migrator func(ctx context.Context, sets ...MigrationSet) error

// Assembly runs modules as one service: Start registers every module's
// routes, applies all their migrations, then starts them in the order they
// were added; Close closes them in reverse order. A failed Start closes
// everything already added, so a host needs no clean-up of its own on the
// error path. The zero value is ready to use.
type Assembly struct {
	mu      sync.Mutex
	mods    []Module
	cancel  context.CancelFunc
	started bool
}

// Assemble is an Assembly of mods, started.
func Assemble(ctx context.Context, api huma.API, migrate Migrator, mods ...Module) (*Assembly, error) {
	a := &Assembly{}
	a.Add(mods...)
	if err := a.Start(ctx, api, migrate); err != nil {
		return nil, err
	}
	return a, nil
}

// Add appends modules: they start after, and close before, those added
// earlier. It panics after Start.
func (a *Assembly) Add(mods ...Module) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started {
		panic("platform: Assembly.Add after Start")
	}
	a.mods = append(a.mods, mods...)
}

// Start registers, migrates and starts the modules. ctx bounds the start-up;
// the modules' lifetime carries its values but not its cancellation, and ends
// when Close has closed them all. On error every module is closed (in reverse)
// and the error names the module that failed.
func (a *Assembly) Start(ctx context.Context, api huma.API, migrate Migrator) error {
	a.mu.Lock()
	if a.started {
		a.mu.Unlock()
		return errors.New("platform: Assembly started twice")
	}
	a.started = true
	mods := a.mods
	lifetime, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.cancel = cancel
	a.mu.Unlock()

	err := func() error {
		var sets []MigrationSet
		for _, m := range mods {
			if err := m.Register(api); err != nil {
				return fmt.Errorf("%s: register: %w", moduleName(m), err)
			}
			if s := m.Migrations(); len(s.Migrations) > 0 {
				sets = append(sets, s)
			}
		}
		if len(sets) > 0 {
			if migrate == nil {
				return errors.New("platform: modules have migrations but the assembly has no Migrator")
			}
			if err := migrate(ctx, sets...); err != nil {
				return err
			}
		}
		for _, m := range mods {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := m.Start(lifetime); err != nil {
				return fmt.Errorf("%s: start: %w", moduleName(m), err)
			}
		}
		return nil
	}()
	if err != nil {
		return errors.Join(err, a.Close(context.WithoutCancel(ctx)))
	}
	return nil
}

// Close closes every module in reverse order, whether or not it started,
// then ends their lifetime. It returns every Close error, joined; a second
// Close does nothing.
func (a *Assembly) Close(ctx context.Context) error {
	a.mu.Lock()
	mods, cancel := a.mods, a.cancel
	a.mods, a.cancel = nil, nil
	a.mu.Unlock()
	var errs []error
	for i := len(mods) - 1; i >= 0; i-- {
		if err := mods[i].Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: close: %w", moduleName(mods[i]), err))
		}
	}
	if cancel != nil {
		cancel()
	}
	return errors.Join(errs...)
}

// moduleName names m in errors: its migration set's module name, else its type.
func moduleName(m Module) string {
	if n := m.Migrations().Module; n != "" {
		return n
	}
	return fmt.Sprintf("%T", m)
}
