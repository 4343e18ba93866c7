package main

import (
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"net"
	"os"
	"time"

	"github.com/keelson-dev/keelson/deployments/assemble"
)

// hostHeartbeat is how often a worker tells the hosts register it is alive.
const hostHeartbeat = 10 * time.Second

// heartbeat is hostHeartbeat, or the tests' shorter one.
func (c Config) heartbeat() time.Duration { return cmp.Or(c.hostHeartbeat, hostHeartbeat) }

// hostAddress is KEELSON_HOST_ADDRESS, else KEELSON_INGRESS_ADDR when it
// names one address, else this machine's name with the ingress port: where
// other hosts' ingresses reach this one.
func hostAddress(c Config) string {
	if c.HostAddress != "" {
		return c.HostAddress
	}
	host, port, _ := net.SplitHostPort(c.IngressAddr)
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return c.IngressAddr
	}
	name, _ := os.Hostname()
	return net.JoinHostPort(name, port)
}

// remoteEvery is how often an ingress reloads the routes other hosts serve.
const remoteEvery = assemble.RemoteEvery

// derivedKey is a key for one purpose, derived from the installation's JWT
// secret (the same on every process of an installation).
func (a *App) derivedKey(purpose string) []byte {
	mac := hmac.New(sha256.New, a.JWTSecret)
	mac.Write([]byte(purpose))
	return mac.Sum(nil)
}
