package egress

import (
	"context"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The chains hold exactly the rules wanted (so a second start changes
// nothing), allowed networks come before the refusals, and remove leaves
// no trace.
func TestFirewallInstallAndRemove(t *testing.T) {
	ctx := context.Background()
	instance := "fwtest" + strings.ReplaceAll(t.Name(), "/", "")[:6]
	f, err := New(ctx, instance, Config{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("10.1.2.0/24")}})
	if err != nil {
		t.Skipf("no iptables with the engine's DOCKER-USER chain here: %v", err)
	}
	t.Cleanup(func() { _ = f.Remove(ctx) })
	require.NoError(t, f.Install(ctx))
	require.NoError(t, f.Install(ctx), "a second install")
	fwd, in := f.rules(false)
	for _, c := range []struct {
		name  string
		rules [][]string
	}{{f.fwd, fwd}, {f.in, in}} {
		got, err := run(ctx, f.ipt, "-S", c.name)
		require.NoError(t, err)
		want := []string{"-N " + c.name}
		for _, r := range c.rules {
			want = append(want, "-A "+c.name+" "+strings.Join(r, " "))
		}
		assert.Equal(t, strings.Join(want, "\n"), got, "iptables prints the rules as written, so a restart finds them in place")
		assert.Contains(t, got, "-d 10.1.2.0/24 -j RETURN")
	}
	got, _ := run(ctx, f.ipt, "-S", f.fwd)
	assert.Less(t, strings.Index(got, "-d 10.1.2.0/24 -j RETURN"), strings.Index(got, "-d 10.0.0.0/8 -j REJECT"), "an allowed network goes before the refusals")
	all, _ := exec.Command(f.ipt, "-w", "-S").CombinedOutput()
	assert.Equal(t, 1, strings.Count(string(all), "-A DOCKER-USER -i "+f.iface+" -j "+f.fwd), "one jump, however many installs")
	assert.Equal(t, 1, strings.Count(string(all), "-A INPUT -i "+f.iface+" -j "+f.in))
	require.NoError(t, f.Remove(ctx))
	all, _ = exec.Command(f.ipt, "-w", "-S").CombinedOutput()
	assert.NotContains(t, string(all), BridgeID(instance))
	if f.ip6t != "" {
		all, _ = exec.Command(f.ip6t, "-w", "-S").CombinedOutput()
		assert.NotContains(t, string(all), BridgeID(instance))
	}
}
