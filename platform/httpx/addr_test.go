package httpx

import (
	"net/http"
	"net/netip"
	"testing"
)

// ForwardedFor reads every X-Forwarded-For line in order, whatever its case,
// and ClientAddr then believes it only past trusted proxies.
func TestForwardedFor(t *testing.T) {
	h := http.Header{}
	h.Add("X-Forwarded-For", "198.51.100.9, 203.0.113.5")
	h.Add("Accept", "*/*")
	h["x-forwarded-for"] = []string{"10.0.0.2"}
	each := func(cb func(name, value string)) {
		for _, name := range []string{"X-Forwarded-For", "Accept", "x-forwarded-for"} {
			for _, v := range h[name] {
				cb(name, v)
			}
		}
	}
	xff := ForwardedFor(each)
	if xff != "198.51.100.9, 203.0.113.5,10.0.0.2" {
		t.Fatalf("ForwardedFor = %q", xff)
	}
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	if got := ClientAddr("10.0.0.1:4000", xff, trusted); got != "203.0.113.5" {
		t.Fatalf("through trusted proxies: %s", got)
	}
	if got := ClientAddr("192.0.2.1:4000", xff, trusted); got != "192.0.2.1" {
		t.Fatalf("from an untrusted peer: %s", got)
	}
}
