package main

import (
	"bufio"
	"net"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/platformtest"
)

// smtpSink is a mail server on loopback speaking real SMTP (EHLO, MAIL, RCPT,
// DATA, QUIT; no STARTTLS or AUTH offered) that keeps every message. With
// delay it waits that long before accepting each message, like a slow relay.
// It stops, and every session goroutine with it, when the test ends.
type smtpSink struct {
	URL   string // smtp://127.0.0.1:port
	delay time.Duration

	mu   sync.Mutex
	msgs []sinkMail
}

type sinkMail struct {
	To   string // RCPT TO address
	Data string // headers and body as sent
}

func newSMTPSink(t *testing.T, delay time.Duration) *smtpSink {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &smtpSink{URL: "smtp://" + l.Addr().String(), delay: delay}
	var wg sync.WaitGroup
	var cmu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			cmu.Lock()
			conns[c] = true
			cmu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { cmu.Lock(); delete(conns, c); cmu.Unlock(); c.Close() }()
				s.session(c)
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		cmu.Lock()
		for c := range conns {
			c.Close()
		}
		cmu.Unlock()
		wg.Wait()
	})
	return s
}

func (s *smtpSink) session(c net.Conn) {
	r := bufio.NewReader(c)
	w := func(line string) { _, _ = c.Write([]byte(line + "\r\n")) }
	w("220 localhost ESMTP sink")
	var rcpt string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\r\n")
		switch cmd := strings.ToUpper(strings.SplitN(line, " ", 2)[0]); cmd {
		case "EHLO", "HELO":
			w("250-localhost")
			w("250 8BITMIME")
		case "MAIL", "RSET", "NOOP":
			w("250 OK")
		case "RCPT":
			if i, j := strings.IndexByte(line, '<'), strings.IndexByte(line, '>'); i >= 0 && j > i {
				rcpt = line[i+1 : j]
			}
			w("250 OK")
		case "DATA":
			w("354 go ahead")
			var b strings.Builder
			for {
				dl, err := r.ReadString('\n')
				if err != nil {
					return
				}
				if dl == ".\r\n" {
					break
				}
				b.WriteString(strings.TrimPrefix(dl, "."))
			}
			if s.delay > 0 {
				time.Sleep(s.delay) // the slow relay this sink plays
			}
			s.mu.Lock()
			s.msgs = append(s.msgs, sinkMail{To: rcpt, Data: b.String()})
			s.mu.Unlock()
			w("250 OK queued")
		case "QUIT":
			w("221 bye")
			return
		default:
			w("502 not implemented")
		}
	}
}

// to answers the messages sent to addr so far.
func (s *smtpSink) to(addr string) []sinkMail {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sinkMail
	for _, m := range s.msgs {
		if m.To == addr {
			out = append(out, m)
		}
	}
	return out
}

// link waits for a message to addr holding a link with path (e.g.
// "/verify-email?token=") after the first skip such messages, and answers its token.
func (s *smtpSink) link(t *testing.T, addr, path string, skip int) string {
	t.Helper()
	re := regexp.MustCompile(regexp.QuoteMeta(path) + `([A-Za-z0-9_%-]+)`)
	tok := ""
	platformtest.Eventually(t, 15*time.Second, "a mail to "+addr+" with "+path, func() bool {
		n := 0
		for _, m := range s.to(addr) {
			if mm := re.FindStringSubmatch(m.Data); mm != nil {
				if n == skip {
					tok, _ = url.QueryUnescape(mm[1])
					return true
				}
				n++
			}
		}
		return false
	})
	return tok
}
