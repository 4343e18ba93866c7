package temporal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/driver/pgdriver"
)

// Live logs across replicas (Postgres). A worker on one machine stores a
// deployment's lines in deployment_logs; an SSE client may be connected to
// another replica. The database tells every replica: a statement-level trigger
// on deployment_logs sends one NOTIFY per deployment per INSERT, carrying
// "<deploymentID>:<highest seq inserted>", and ListenLogs hands each to the
// local log hub, which reads the lines after the last one it published from
// the table (so nothing is lost or repeated: the table is the source, the
// notification only a wake-up). No change to the writers is needed.
//
// Not used by this package itself; it is the add-on the reference server plugs
// into the deployments log hub when the database is Postgres (with any engine:
// two API replicas on the embedded engine need it as well).

// LogNotifyChannel is the Postgres notification channel.
const LogNotifyChannel = "keelson_deployment_logs"

// LogNotifyMigrations installs the trigger (Postgres only; a no-op on SQLite,
// where one process owns the database). Run it after deployments.Migrations.
func LogNotifyMigrations() db.MigrationSet {
	return db.MigrationSet{
		Module: "deployments_lognotify",
		Migrations: []db.Migration{{
			ID: "0001_notify_trigger",
			Up: func(ctx context.Context, idb bun.IDB) error {
				if !db.IsPostgres(idb) {
					return nil
				}
				_, err := idb.ExecContext(ctx, `
CREATE OR REPLACE FUNCTION keelson_deployment_logs_notify() RETURNS trigger AS $$
DECLARE r record;
BEGIN
	FOR r IN SELECT deployment_id, max(seq) AS seq FROM new_rows GROUP BY deployment_id LOOP
		PERFORM pg_notify('`+LogNotifyChannel+`', r.deployment_id || ':' || r.seq);
	END LOOP;
	RETURN NULL;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS keelson_deployment_logs_notify ON deployment_logs;
CREATE TRIGGER keelson_deployment_logs_notify AFTER INSERT ON deployment_logs
	REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
	EXECUTE FUNCTION keelson_deployment_logs_notify();`)
				return err
			},
		}},
	}
}

// StoredLines is the hook the deployments log hub exposes to ListenLogs:
// lines of deploymentID up to seq are stored (possibly by another process);
// publish to local subscribers those after the last one published. It must
// not block (queue the work on the hub's writer goroutine).
type StoredLines interface {
	LinesStored(deploymentID string, seq int64)
}

// ListenLogs listens on LogNotifyChannel until ctx ends and passes each
// notification to hub. The listener reconnects by itself after a lost
// connection; notifications sent while it was away are not replayed, so the
// hub should also re-read (e.g. on a subscriber's heartbeat tick) for
// streams that wait. Returns nil when ctx ends; an error if bdb is not Postgres.
func ListenLogs(ctx context.Context, bdb *bun.DB, hub StoredLines, log *slog.Logger) error {
	if !db.IsPostgres(bdb) {
		return errors.New("temporal: ListenLogs needs Postgres")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln := pgdriver.NewListener(bdb)
	defer ln.Close()
	if err := ln.Listen(ctx, LogNotifyChannel); err != nil {
		return fmt.Errorf("temporal: listen %s: %w", LogNotifyChannel, err)
	}
	ch := ln.Channel()
	for {
		select {
		case <-ctx.Done():
			return nil
		case n, ok := <-ch:
			if !ok {
				return nil
			}
			id, seq, err := parseLogNotification(n.Payload)
			if err != nil {
				log.Warn("bad deployment log notification", "payload", n.Payload, "err", err)
				continue
			}
			hub.LinesStored(id, seq)
		}
	}
}

func parseLogNotification(payload string) (string, int64, error) {
	id, s, ok := strings.Cut(payload, ":")
	if !ok || id == "" {
		return "", 0, errors.New("want <deploymentID>:<seq>")
	}
	seq, err := strconv.ParseInt(s, 10, 64)
	return id, seq, err
}
