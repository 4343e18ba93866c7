package certs

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/uptrace/bun"

	"github.com/keelson-dev/keelson/platform/db"
)

// assetRow is one certmagic asset (a certificate, its key and metadata, an
// ACME account, a challenge's state), keyed by certmagic's slash-separated path.
type assetRow struct {
	bun.BaseModel `bun:"table:tls_assets"`
	Name          string    `bun:"name,pk,type:varchar(1024)"`
	Value         []byte    `bun:"value,notnull"`
	Modified      time.Time `bun:"modified,notnull"`
}

// lockRow is a lock one process holds (certmagic takes one per name before
// it orders or renews a certificate): it expires unless its holder keeps it
// alive, so a holder that died does not block the others for long.
type lockRow struct {
	bun.BaseModel `bun:"table:tls_locks"`
	Name          string    `bun:"name,pk,type:varchar(1024)"`
	Token         string    `bun:"token,notnull,type:varchar(64)"`
	ExpiresAt     time.Time `bun:"expires_at,notnull"`
}

// Migrations are the tables of Storage, for the host to run.
func Migrations() db.MigrationSet {
	return db.MigrationSet{Module: "ingress_certs", Migrations: []db.Migration{{
		ID: "0001_init",
		Up: db.CreateTables((*assetRow)(nil), (*lockRow)(nil)),
	}}}
}

// Lock timings: a lock lives lockTTL past its last keep-alive, sent every
// lockTTL/3; a waiter tries again every lockPoll.
const (
	lockTTL  = 30 * time.Second
	lockPoll = 250 * time.Millisecond
)

// Storage is certmagic's Storage and Locker over Keelson's database
// (SQLite or Postgres): every ingress on the same database shares the
// certificates, the ACME account and the challenges' state, and the locks
// make one of them order a certificate while the others wait for it.
type Storage struct {
	db *bun.DB

	mu   sync.Mutex
	held map[string]*heldLock // name -> the lock this Storage holds
}

type heldLock struct {
	token string
	stop  chan struct{}
	done  chan struct{}
}

var _ certmagic.Storage = (*Storage)(nil)

// NewStorage returns a Storage over bdb (its tables: Migrations).
func NewStorage(bdb *bun.DB) *Storage {
	return &Storage{db: bdb, held: map[string]*heldLock{}}
}

// Store puts value at key.
func (s *Storage) Store(ctx context.Context, key string, value []byte) error {
	row := &assetRow{Name: key, Value: value, Modified: time.Now().UTC()}
	_, err := s.db.NewInsert().Model(row).
		On("CONFLICT (name) DO UPDATE").Set("value = EXCLUDED.value").Set("modified = EXCLUDED.modified").Exec(ctx)
	return db.Translate(err)
}

// Load returns the value at key, or an error wrapping fs.ErrNotExist.
func (s *Storage) Load(ctx context.Context, key string) ([]byte, error) {
	row := new(assetRow)
	err := s.db.NewSelect().Model(row).Column("value").Where("name = ?", key).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%s: %w", key, fs.ErrNotExist)
	}
	if err != nil {
		return nil, db.Translate(err)
	}
	return row.Value, nil
}

// Delete removes key and, when key is a "directory", everything under it.
func (s *Storage) Delete(ctx context.Context, key string) error {
	lo, hi := under(key)
	res, err := s.db.NewDelete().Model((*assetRow)(nil)).
		Where("name = ? OR (name >= ? AND name < ?)", key, lo, hi).Exec(ctx)
	if err != nil {
		return db.Translate(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%s: %w", key, fs.ErrNotExist)
	}
	return nil
}

// Exists reports whether key is stored.
func (s *Storage) Exists(ctx context.Context, key string) bool {
	n, err := s.db.NewSelect().Model((*assetRow)(nil)).Where("name = ?", key).Count(ctx)
	return err == nil && n > 0
}

// List returns the keys under path: every one when recursive, else the
// direct children (files and "directories").
func (s *Storage) List(ctx context.Context, path string, recursive bool) ([]string, error) {
	path = strings.TrimSuffix(path, "/")
	var names []string
	q := s.db.NewSelect().Model((*assetRow)(nil)).Column("name").Order("name")
	if path != "" {
		lo, hi := under(path)
		q = q.Where("name >= ? AND name < ?", lo, hi)
	}
	if err := q.Scan(ctx, &names); err != nil {
		return nil, db.Translate(err)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s: %w", path, fs.ErrNotExist)
	}
	if recursive {
		return names, nil
	}
	prefix := path + "/"
	if path == "" {
		prefix = ""
	}
	var out []string
	for _, n := range names {
		child, _, _ := strings.Cut(strings.TrimPrefix(n, prefix), "/")
		if c := prefix + child; len(out) == 0 || out[len(out)-1] != c {
			out = append(out, c)
		}
	}
	return out, nil
}

// Stat describes key: a stored key is terminal, a prefix of stored keys is a
// "directory".
func (s *Storage) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	var mod time.Time
	var size int64
	err := s.db.NewSelect().TableExpr("tls_assets").ColumnExpr("modified").ColumnExpr("length(value)").
		Where("name = ?", key).Scan(ctx, &mod, &size)
	if err == nil {
		return certmagic.KeyInfo{Key: key, Modified: mod, Size: size, IsTerminal: true}, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return certmagic.KeyInfo{}, db.Translate(err)
	}
	lo, hi := under(key)
	n, err := s.db.NewSelect().Model((*assetRow)(nil)).Where("name >= ? AND name < ?", lo, hi).Count(ctx)
	if err != nil {
		return certmagic.KeyInfo{}, db.Translate(err)
	}
	if n == 0 {
		return certmagic.KeyInfo{}, fmt.Errorf("%s: %w", key, fs.ErrNotExist)
	}
	return certmagic.KeyInfo{Key: key, IsTerminal: false}, nil
}

// Lock takes the lock name, waiting (polling) while another process holds
// it, until ctx ends. A lock whose holder stopped keeping it alive for
// lockTTL is taken over.
func (s *Storage) Lock(ctx context.Context, name string) error {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	token := hex.EncodeToString(b)
	t := time.NewTicker(lockPoll)
	defer t.Stop()
	for {
		ok, err := s.tryLock(ctx, name, token)
		if err != nil {
			return err
		}
		if ok {
			h := &heldLock{token: token, stop: make(chan struct{}), done: make(chan struct{})}
			s.mu.Lock()
			s.held[name] = h
			s.mu.Unlock()
			go s.keepAlive(name, h)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// tryLock takes name if it is free or expired.
func (s *Storage) tryLock(ctx context.Context, name, token string) (bool, error) {
	now := time.Now().UTC()
	res, err := s.db.NewInsert().Model(&lockRow{Name: name, Token: token, ExpiresAt: now.Add(lockTTL)}).
		On("CONFLICT (name) DO NOTHING").Exec(ctx)
	if err != nil {
		return false, db.Translate(err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return true, nil
	}
	res, err = s.db.NewUpdate().Model((*lockRow)(nil)).Set("token = ?", token).Set("expires_at = ?", now.Add(lockTTL)).
		Where("name = ? AND expires_at < ?", name, now).Exec(ctx)
	if err != nil {
		return false, db.Translate(err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// keepAlive pushes the expiry of a held lock forward until Unlock.
func (s *Storage) keepAlive(name string, h *heldLock) {
	defer close(h.done)
	t := time.NewTicker(lockTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), lockTTL/3)
		_, _ = s.db.NewUpdate().Model((*lockRow)(nil)).Set("expires_at = ?", time.Now().UTC().Add(lockTTL)).
			Where("name = ? AND token = ?", name, h.token).Exec(ctx)
		cancel()
	}
}

// Unlock releases the lock name this Storage holds.
func (s *Storage) Unlock(ctx context.Context, name string) error {
	s.mu.Lock()
	h := s.held[name]
	delete(s.held, name)
	s.mu.Unlock()
	if h == nil {
		return fmt.Errorf("certs: lock %q is not held here", name)
	}
	close(h.stop)
	<-h.done
	_, err := s.db.NewDelete().Model((*lockRow)(nil)).Where("name = ? AND token = ?", name, h.token).Exec(ctx)
	return db.Translate(err)
}

// Close releases every lock still held (their keep-alives stop).
func (s *Storage) Close(ctx context.Context) error {
	s.mu.Lock()
	names := make([]string, 0, len(s.held))
	for n := range s.held {
		names = append(names, n)
	}
	s.mu.Unlock()
	var errs []error
	for _, n := range names {
		errs = append(errs, s.Unlock(ctx, n))
	}
	return errors.Join(errs...)
}

// under is the key range of the keys below path: [path/, path0), '0' being
// the byte after '/'.
func under(path string) (lo, hi string) {
	path = strings.TrimSuffix(path, "/")
	return path + "/", path + "0"
}
