package rt_test

import (
	"slices"
	"testing"

	"github.com/keelson-dev/keelson/deployments/rt"
)

// TestJobEnviron: the variables a build or app gets, and the ones a
// deployment fails on with a message naming them.
func TestJobEnviron(t *testing.T) {
	t.Parallel()
	job := rt.Job{Env: []rt.EnvVar{{Key: "A", Value: "1"}, {Key: "PORT", Value: "9"}, {Key: "", Value: "x"}}}
	env, err := job.Environ("", "PORT")
	if err != nil || !slices.Equal(env, []string{"A=1"}) {
		t.Fatalf("Environ(\"\", PORT) = %q, %v; want [A=1]", env, err)
	}
	for _, c := range []struct {
		v    rt.EnvVar
		want string
	}{
		{rt.EnvVar{Key: ""}, `environment variable name "" is not valid`},
		{rt.EnvVar{Key: "A=B"}, `environment variable name "A=B" is not valid`},
		{rt.EnvVar{Key: "A\x00"}, `environment variable name "A\x00" is not valid`},
		{rt.EnvVar{Key: "A", Value: "x\x00y"}, "environment variable A contains a NUL byte"},
	} {
		_, err := rt.Job{Env: []rt.EnvVar{c.v}}.Environ()
		if err == nil || err.Error() != c.want {
			t.Errorf("Environ(%q) = %v, want %s", c.v.Key, err, c.want)
		}
	}
}
