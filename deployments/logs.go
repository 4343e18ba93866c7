package deployments

import "github.com/keelson-dev/keelson/deployments/logstream"

// The log store, fan-out and streams live in deployments/logstream; these
// names keep the module's API.
type (
	// Logs stores deployment log lines and fans them out to live streams.
	Logs = logstream.Hub
	// LogsConfig tunes Logs. Zero values take the defaults.
	LogsConfig = logstream.Config
	// LogLine is one stored log line of a deployment.
	LogLine = logstream.Line
	// LogListParams select log lines of one deployment in sequence order.
	LogListParams = logstream.ListParams
	// LogEvent is what a Subscription receives.
	LogEvent = logstream.Event
	// Subscription receives a deployment's lines as they are stored.
	Subscription = logstream.Subscription
	// Sink is one deployment's LogSink.
	Sink = logstream.Sink
)

// Defaults of the log caps and the account log budget (operator settings).
const (
	DefaultMaxBuildLines    = logstream.DefaultMaxBuildLines
	DefaultMaxBuildBytes    = logstream.DefaultMaxBuildBytes
	DefaultMaxAppLines      = logstream.DefaultMaxAppLines
	DefaultAccountLogBudget = logstream.DefaultAccountLogBudget
)

var _ logstream.Store = (*Store)(nil)

// NewLogs starts a log writer over store. Call Close when done.
func NewLogs(store *Store, cfg LogsConfig) *Logs { return logstream.New(store, cfg) }
