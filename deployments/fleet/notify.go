package fleet

import (
	"context"

	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// RouteChannel is the Postgres channel on which a change of the route
// table is announced: a deployment became LIVE, stopped being LIVE or
// moved host, or a host was added, readdressed or removed. Every ingress
// listens and reloads its remote routes at once (the payload is not read).
const RouteChannel = "keelson_routes"

// Migrations installs the route table's triggers (Postgres only; a no-op
// on SQLite, where one process serves every route). They are a schema of
// their own, applied after the deployments and hosts tables exist.
func Migrations() db.MigrationSet {
	return db.MigrationSet{Module: "fleet", Migrations: []db.Migration{{
		ID: "0001_route_notify",
		Up: func(ctx context.Context, idb bun.IDB) error { return db.ExecPostgres(ctx, idb, routeTriggers) },
	}}}
}

// routeTriggers notify RouteChannel only for the changes LiveHosts can
// see, so a deployment's many other updates (steps, log bytes) stay quiet.
const routeTriggers = `
CREATE OR REPLACE FUNCTION keelson_route_deployment_notify() RETURNS trigger AS $$
BEGIN
	IF (TG_OP = 'INSERT' AND NEW.status = 'LIVE')
		OR (TG_OP = 'DELETE' AND OLD.status = 'LIVE')
		OR (TG_OP = 'UPDATE' AND (OLD.status = 'LIVE' OR NEW.status = 'LIVE')
			AND (OLD.status IS DISTINCT FROM NEW.status OR OLD.host IS DISTINCT FROM NEW.host
				OR OLD.project_slug IS DISTINCT FROM NEW.project_slug)) THEN
		PERFORM pg_notify('` + RouteChannel + `', '');
	END IF;
	RETURN NULL;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS keelson_route_deployment_change ON deployments;
CREATE TRIGGER keelson_route_deployment_change AFTER INSERT OR UPDATE OR DELETE ON deployments
	FOR EACH ROW EXECUTE FUNCTION keelson_route_deployment_notify();
CREATE OR REPLACE FUNCTION keelson_route_host_notify() RETURNS trigger AS $$
BEGIN
	IF TG_OP <> 'UPDATE' OR OLD.address IS DISTINCT FROM NEW.address OR OLD.queue IS DISTINCT FROM NEW.queue THEN
		PERFORM pg_notify('` + RouteChannel + `', '');
	END IF;
	RETURN NULL;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS keelson_route_host_change ON hosts;
CREATE TRIGGER keelson_route_host_change AFTER INSERT OR UPDATE OR DELETE ON hosts
	FOR EACH ROW EXECUTE FUNCTION keelson_route_host_notify();`

// RouteWake turns route-table notifications into kicks of the reload loop:
// a db.Invalidator for db.Listen. A kick is dropped when one is already
// pending (that reload will read the change too). A listening session that
// goes live kicks as well, for what it missed while it was down.
type RouteWake chan struct{}

// NewRouteWake returns a RouteWake holding at most one pending kick.
func NewRouteWake() RouteWake { return make(RouteWake, 1) }

// Invalidate kicks the reload.
func (w RouteWake) Invalidate(string, string) {
	select {
	case w <- struct{}{}:
	default:
	}
}

// Reset kicks the reload when a listening session went live.
func (w RouteWake) Reset(live bool) {
	if live {
		w.Invalidate("", "")
	}
}
