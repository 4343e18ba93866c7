package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"
)

// Prepared is one SQL statement of a hot path, prepared once on a
// *bun.DB and run through database/sql with bound arguments. bun interpolates
// arguments into the statement's text, so the database parses every bun query
// again (on SQLite a large share of a small read's CPU); a Prepared is parsed
// once per connection.
//
// Write the query with ? placeholders; on Postgres they become $1, $2, ...
// (the query must hold no other ?). Write times through TimeArg and read them
// through ScanTime/TimeColumn, so the statement is the same on both dialects.
type Prepared struct {
	query string

	mu   sync.Mutex
	stmt *sql.Stmt
	on   *bun.DB
}

// NewPrepared returns the statement query, prepared on first use.
func NewPrepared(query string) *Prepared { return &Prepared{query: query} }

func (p *Prepared) get(ctx context.Context, bdb *bun.DB) (*sql.Stmt, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.on != nil && p.on != bdb {
		return nil, errors.New("db: a Prepared is bound to one database")
	}
	if p.stmt != nil {
		return p.stmt, nil
	}
	q := p.query
	if IsPostgres(bdb) {
		q = dollarPlaceholders(q)
	}
	st, err := bdb.DB.PrepareContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("db: prepare: %w", err)
	}
	p.stmt, p.on = st, bdb
	return st, nil
}

// Query runs the statement on bdb.
func (p *Prepared) Query(ctx context.Context, bdb *bun.DB, args ...any) (*sql.Rows, error) {
	st, err := p.get(ctx, bdb)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// QueryRow runs the statement on bdb for one row; the error (a failed
// prepare too) comes from Scan, sql.ErrNoRows when there is no row.
func (p *Prepared) QueryRow(ctx context.Context, bdb *bun.DB, dest ...any) *Row {
	st, err := p.get(ctx, bdb)
	if err != nil {
		return &Row{err: err}
	}
	return &Row{row: st.QueryRowContext(ctx, dest...)}
}

// Prepare prepares the statement on bdb now, for ExecTx and QueryRowTx (a
// no-op once prepared, and on Postgres, where those do not use it). Call it
// before the transaction: on SQLite the transaction holds the one
// connection, which preparing inside it would wait for forever.
func (p *Prepared) Prepare(ctx context.Context, bdb *bun.DB) error {
	if IsPostgres(bdb) {
		return nil
	}
	_, err := p.get(ctx, bdb)
	return err
}

// inTx is the statement, prepared by Prepare, for tx: on SQLite (one
// connection) the statement already prepared on that connection.
func (p *Prepared) inTx(ctx context.Context, tx bun.Tx) (*sql.Stmt, error) {
	p.mu.Lock()
	st := p.stmt
	p.mu.Unlock()
	if st == nil {
		return nil, errors.New("db: a Prepared run in a transaction must be prepared before it (Prepare)")
	}
	return tx.StmtContext(ctx, st), nil
}

// ExecTx runs the statement in tx, a transaction of bdb. On SQLite the
// statement Prepare prepared is reused on the transaction's connection. On
// Postgres the transaction may hold a connection the statement was never
// prepared on, where preparing would cost a round trip per transaction:
// bun runs the query text with its arguments, as any bun query.
func (p *Prepared) ExecTx(ctx context.Context, bdb *bun.DB, tx bun.Tx, args ...any) (sql.Result, error) {
	if IsPostgres(bdb) {
		return tx.ExecContext(ctx, p.query, args...)
	}
	st, err := p.inTx(ctx, tx)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

// QueryRowTx runs the statement in tx, a transaction of bdb, for one row
// (see ExecTx and QueryRow).
func (p *Prepared) QueryRowTx(ctx context.Context, bdb *bun.DB, tx bun.Tx, args ...any) *Row {
	if IsPostgres(bdb) {
		return &Row{row: tx.QueryRowContext(ctx, p.query, args...)}
	}
	st, err := p.inTx(ctx, tx)
	if err != nil {
		return &Row{err: err}
	}
	return &Row{row: st.QueryRowContext(ctx, args...)}
}

// Row is the result of QueryRow.
type Row struct {
	row *sql.Row
	err error
}

// Scan copies the row's columns into dest.
func (r *Row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	return r.row.Scan(dest...)
}

// Close releases the statement; a later use prepares it again.
func (p *Prepared) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stmt == nil {
		return nil
	}
	err := p.stmt.Close()
	p.stmt = nil
	return err
}

func dollarPlaceholders(q string) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// storedTimeLayout is how bun writes a time.Time into a SQLite TEXT column
// (schema.BaseDialect.AppendTime), always in UTC.
const storedTimeLayout = "2006-01-02 15:04:05.999999-07:00"

// TimeColumn is the select expression of a time column col for ScanTime. On
// SQLite it reads the stored text as it is (a column declared TIMESTAMP is
// otherwise parsed by the driver, trying several layouts through time.Parse
// for every value); on Postgres the driver's time.Time.
func TimeColumn(idb bun.IDB, col string) string {
	if IsPostgres(idb) {
		return col
	}
	return "CAST(" + col + " AS TEXT)"
}

// TimeArg is t as a statement argument compared with a stored time column:
// on SQLite the very text bun stores (so text comparison orders it), on
// Postgres t itself.
func TimeArg(idb bun.IDB, t time.Time) any {
	if IsPostgres(idb) {
		return t
	}
	return t.UTC().Format(storedTimeLayout)
}

// ScanTime returns a sql.Scanner that stores a time column (see TimeColumn)
// into t: a time.Time as it is, or the stored text parsed by ParseStoredTime.
// NULL stores the zero time.
func ScanTime(t *time.Time) sql.Scanner { return (*timeScanner)(t) }

type timeScanner time.Time

func (ts *timeScanner) Scan(src any) error {
	switch v := src.(type) {
	case time.Time:
		*ts = timeScanner(v)
	case string:
		t, err := ParseStoredTime(v)
		if err != nil {
			return err
		}
		*ts = timeScanner(t)
	case []byte:
		t, err := ParseStoredTime(string(v))
		if err != nil {
			return err
		}
		*ts = timeScanner(t)
	case nil:
		*ts = timeScanner(time.Time{})
	default:
		return fmt.Errorf("db: cannot scan %T into a time", src)
	}
	return nil
}

// fallbackTimeLayouts are the other text forms a SQLite time may have
// (those the modernc driver reads: SQLite's date functions, time.Time.String
// for an argument bound without bun).
var fallbackTimeLayouts = []string{
	"2006-01-02 15:04:05.999999999 -0700 MST",
	"2006-01-02 15:04:05.999999999-07:00",
	"2006-01-02T15:04:05.999999999-07:00",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04",
	"2006-01-02T15:04",
	"2006-01-02",
}

// ParseStoredTime parses a time as stored in SQLite text. The form bun writes
// ("2006-01-02 15:04:05[.frac]+00:00", or another offset) is read by hand
// without time.Parse; any other form falls back to the layouts the driver
// accepts. A value with no zone is UTC.
func ParseStoredTime(s string) (time.Time, error) {
	if t, ok := parseBunTime(s); ok {
		return t, nil
	}
	if i := strings.Index(s, " m="); i > 0 { // time.Time.String with a monotonic reading
		s = s[:i]
	}
	s = strings.TrimSuffix(s, "Z")
	for _, l := range fallbackTimeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("db: unrecognised stored time %q", s)
}

// parseBunTime reads "YYYY-MM-DD HH:MM:SS[.f{1,9}](+|-)HH:MM" or with a
// trailing Z instead of the offset.
func parseBunTime(s string) (time.Time, bool) {
	if len(s) < 20 || s[4] != '-' || s[7] != '-' || (s[10] != ' ' && s[10] != 'T') || s[13] != ':' || s[16] != ':' {
		return time.Time{}, false
	}
	num := func(a, b int) (int, bool) {
		n := 0
		for i := a; i < b; i++ {
			c := s[i]
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	year, ok1 := num(0, 4)
	month, ok2 := num(5, 7)
	day, ok3 := num(8, 10)
	hour, ok4 := num(11, 13)
	minute, ok5 := num(14, 16)
	sec, ok6 := num(17, 19)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || month < 1 || month > 12 || day < 1 || day > 31 ||
		hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	i := 19
	nsec := 0
	if s[i] == '.' {
		j := i + 1
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		digits := j - i - 1
		if digits == 0 || digits > 9 {
			return time.Time{}, false
		}
		f, _ := num(i+1, j)
		for k := digits; k < 9; k++ {
			f *= 10
		}
		nsec, i = f, j
	}
	offset := 0
	switch rest := s[i:]; {
	case rest == "Z":
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		oh, okh := num(i+1, i+3)
		om, okm := num(i+4, i+6)
		if !okh || !okm || oh > 23 || om > 59 {
			return time.Time{}, false
		}
		offset = oh*3600 + om*60
		if rest[0] == '-' {
			offset = -offset
		}
	default:
		return time.Time{}, false
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC)
	if t.Day() != day { // 31 February and the like
		return time.Time{}, false
	}
	if offset != 0 {
		t = t.Add(-time.Duration(offset) * time.Second)
	}
	return t, true
}
