package ingress_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/deployments/rt"
	"github.com/keelson-dev/keelson/platform"
)

// A route only moves forward: a LIVE deployment started again after a
// restart (older id) cannot take the host back from the deployment that
// replaced it, which would then lose its route when the old one is released.
func TestRouteNeverMovesBackToAnOlderDeployment(t *testing.T) {
	t.Parallel()
	r, srv := newRouter(t, ingress.Config{})
	a, b := app(t, "A"), app(t, "B")
	older, newer := platform.NewID(), platform.NewID()
	for older >= newer { // ids made in one millisecond order by their random part
		newer = platform.NewID()
	}
	require.NoError(t, r.Set("site", newer, upstream(b)))
	err := r.Set("site", older, upstream(a))
	require.ErrorIs(t, err, rt.ErrNewerRouted)
	assert.Contains(t, err.Error(), newer, "the error names the deployment the host keeps")
	_, body := get(t, srv, "site.localhost", "/")
	assert.True(t, strings.HasPrefix(body, "B "), body)

	// The released older deployment cannot remove the newer one's route.
	assert.False(t, r.Remove("site", older))
	_, body = get(t, srv, "site.localhost", "/")
	assert.True(t, strings.HasPrefix(body, "B "), body)

	// Forward moves still replace, and the same deployment may route again.
	newest := platform.NewID()
	for newest <= newer {
		newest = platform.NewID()
	}
	require.NoError(t, r.Set("site", newest, upstream(a)))
	require.NoError(t, r.Set("site", newest, upstream(a)))
	_, body = get(t, srv, "site.localhost", "/")
	assert.True(t, strings.HasPrefix(body, "A "), body)
}
