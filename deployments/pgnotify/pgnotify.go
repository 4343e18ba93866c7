// Package pgnotify carries deployment logs across processes that share one
// Postgres database: API replicas and workers on several machines.
//
// A worker stores a deployment's lines in deployment_logs; an SSE client may
// be connected to another replica. The database tells every replica: a
// statement-level trigger on deployment_logs sends one NOTIFY per deployment
// per INSERT, "<deploymentID>:<highest seq inserted>", and a row trigger on
// deployments sends "<deploymentID>:end" when a deployment reaches LIVE,
// FAILED or CANCELLED. Listen hands each to the local log hub
// (*deployments.Logs), which reads the lines after the last one it published
// from the table: the table is the source, a notification only a wake-up, so
// nothing is lost or repeated. Writers need no change.
//
// Notifications sent while the listener is reconnecting are not replayed;
// Listen asks the hub to re-read (Hub.Resync) every Config.ResyncEvery and
// whenever its buffer overflowed.
//
// It is not Temporal-specific: two API replicas on the embedded engine's
// database need it as well. SQLite has one process per database and needs
// none of it (Migrations is a no-op there).
package pgnotify

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/driver/pgdriver"
)

// Channel is the Postgres notification channel.
const Channel = "keelson_deployment_logs"

// Migrations installs the triggers (Postgres only; a no-op on SQLite). Run it
// after deployments.Migrations.
func Migrations() db.MigrationSet {
	pgOnly := func(sql string) func(context.Context, bun.IDB) error {
		return func(ctx context.Context, idb bun.IDB) error {
			if !db.IsPostgres(idb) {
				return nil
			}
			_, err := idb.ExecContext(ctx, sql)
			return err
		}
	}
	return db.MigrationSet{
		// The module name predates this package (deployments/temporal held it).
		Module: "deployments_lognotify",
		Migrations: []db.Migration{
			{ID: "0001_notify_trigger", Up: pgOnly(`
CREATE OR REPLACE FUNCTION keelson_deployment_logs_notify() RETURNS trigger AS $$
DECLARE r record;
BEGIN
	FOR r IN SELECT deployment_id, max(seq) AS seq FROM new_rows GROUP BY deployment_id LOOP
		PERFORM pg_notify('` + Channel + `', r.deployment_id || ':' || r.seq);
	END LOOP;
	RETURN NULL;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS keelson_deployment_logs_notify ON deployment_logs;
CREATE TRIGGER keelson_deployment_logs_notify AFTER INSERT ON deployment_logs
	REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
	EXECUTE FUNCTION keelson_deployment_logs_notify();`)},
			{ID: "0002_end_trigger", Up: pgOnly(`
CREATE OR REPLACE FUNCTION keelson_deployment_end_notify() RETURNS trigger AS $$
BEGIN
	PERFORM pg_notify('` + Channel + `', NEW.id || ':end');
	RETURN NULL;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS keelson_deployment_end_notify ON deployments;
CREATE TRIGGER keelson_deployment_end_notify AFTER UPDATE OF status ON deployments
	FOR EACH ROW WHEN (NEW.status IN ('LIVE', 'FAILED', 'CANCELLED') AND OLD.status IS DISTINCT FROM NEW.status)
	EXECUTE FUNCTION keelson_deployment_end_notify();`)},
		},
	}
}

// Hub is what Listen feeds: *deployments.Logs. None of its methods may block.
type Hub interface {
	// LinesStored: lines of the deployment up to seq are stored (possibly by
	// another process); publish those after the last one published here.
	LinesStored(deploymentID string, seq int64)
	// DeploymentEnded: the deployment reached a terminal status; its streams
	// may end once they have every stored line.
	DeploymentEnded(deploymentID string)
	// Resync: notifications may have been lost; re-read for every stream.
	Resync()
}

// Config tunes Listen. Zero values take the defaults.
type Config struct {
	Logger *slog.Logger
	// ResyncEvery is how often the hub re-reads for waiting streams, so a
	// notification lost while the listener reconnected delays lines at most
	// this long. Default 5s.
	ResyncEvery time.Duration
}

// Listen listens on Channel until ctx ends and passes each notification to
// hub. It returns an error if bdb is not Postgres or the first LISTEN fails,
// nil when ctx ends. The listener reconnects by itself after a lost connection.
func Listen(ctx context.Context, bdb *bun.DB, hub Hub, cfg Config) error {
	if !db.IsPostgres(bdb) {
		return errors.New("pgnotify: Listen needs Postgres")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln := pgdriver.NewListener(bdb)
	defer ln.Close()
	if err := ln.Listen(ctx, Channel); err != nil {
		return fmt.Errorf("pgnotify: listen %s: %w", Channel, err)
	}
	ch := ln.Channel(pgdriver.WithChannelOverflowHandler(func(pgdriver.Notification) { hub.Resync() }))
	resync := time.NewTicker(cmp.Or(cfg.ResyncEvery, 5*time.Second))
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-resync.C:
			hub.Resync()
		case n, ok := <-ch:
			if !ok {
				return nil
			}
			id, seq, end, err := parse(n.Payload)
			switch {
			case err != nil:
				log.Warn("bad deployment log notification", "payload", n.Payload, "err", err)
			case end:
				hub.DeploymentEnded(id)
			default:
				hub.LinesStored(id, seq)
			}
		}
	}
}

// parse reads "<deploymentID>:<seq>" or "<deploymentID>:end".
func parse(payload string) (id string, seq int64, end bool, err error) {
	id, s, ok := strings.Cut(payload, ":")
	if !ok || id == "" {
		return "", 0, false, errors.New("want <deploymentID>:<seq> or <deploymentID>:end")
	}
	if s == "end" {
		return id, 0, true, nil
	}
	seq, err = strconv.ParseInt(s, 10, 64)
	if err == nil && seq < 1 {
		err = errors.New("seq must be positive")
	}
	return id, seq, false, err
}
