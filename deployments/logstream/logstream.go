// Package logstream stores deployment log lines and streams them: one Sink
// per deployment masks, caps and queues lines; the Hub's writer numbers and
// stores them and fans them out to live subscribers; Streams serves those as
// Server-Sent Events (ready, the backlog, live lines, done), on taken-over
// HTTP/1.1 connections where it can; the account log budget deletes the
// logs of an account's oldest ended deployments.
//
// It is not the module: the deployments package owns the tables and their
// SQL (Store, which *deployments.Store implements), the route and its auth.
// The stored line carries no SSE framing; the writer encodes a stored line's
// frame once and shares it between the streams.
package logstream

import (
	"context"
	"time"

	"github.com/uptrace/bun"
)

// Line is one stored log line of a deployment.
type Line struct {
	bun.BaseModel `bun:"table:deployment_logs,alias:log_line"`

	DeploymentID string    `bun:"deployment_id,pk,type:varchar(36)"`
	Seq          int64     `bun:"seq,pk"`
	Time         time.Time `bun:"ts,notnull"`
	Stream       string    `bun:"stream,notnull"`
	Message      string    `bun:"message,type:text,notnull"`

	// frame is the line's SSE event, encoded once by the log writer and
	// shared by every live stream (nil for lines read from the database).
	frame []byte `bun:"-"`
}

// ListParams select log lines of one deployment in sequence order.
type ListParams struct {
	DeploymentID string
	AfterSeq     int64     // lines with seq > AfterSeq
	Since        time.Time // and, when set, ts >= Since
	Limit        int
}

// Store is what the Hub and its streams read and write (a *deployments.Store).
type Store interface {
	// LogInsert stores lines (numbered by the caller) in one statement;
	// platform.ErrConflict when a number is taken.
	LogInsert(ctx context.Context, lines []Line) error
	// LogList returns up to p.Limit lines in sequence order.
	LogList(ctx context.Context, p ListParams) ([]Line, error)
	// LogMaxSeq returns the deployment's highest stored sequence number (0: none).
	LogMaxSeq(ctx context.Context, deploymentID string) (int64, error)
	// LogTrimApp deletes the deployment's app lines but the newest keep.
	LogTrimApp(ctx context.Context, deploymentID string, keep int) error
	// DeploymentsEnded answers, for each of ids that exists, whether it
	// reached a terminal status (ids absent from the map were deleted).
	DeploymentsEnded(ctx context.Context, ids []string) (map[string]bool, error)
	// LogOwnersOf returns the owners of the deployments ids that exist.
	LogOwnersOf(ctx context.Context, ids []string) ([]string, error)
	// LogPruneOwner brings owner's stored logs within budget (the logs of
	// their oldest ended deployments give way to one line holding note) and
	// returns the deployments pruned.
	LogPruneOwner(ctx context.Context, owner string, budget int64, note string) ([]string, error)
}

// Metrics is told how many lines this process stored. Its method is called
// by the writer: it must be cheap and never block.
type Metrics interface {
	LogLinesStored(n int)
}

type noMetrics struct{}

func (noMetrics) LogLinesStored(int) {}
