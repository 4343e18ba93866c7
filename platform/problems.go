package platform

import (
	"errors"
	"net/url"
)

// Problems gathers what is wrong with a module's Deps or config, one error
// each, so that New reports them all at once (errors.Join(p...)).
type Problems []error

// Require records "name is required" unless present.
func (p *Problems) Require(name string, present bool) {
	if !present {
		*p = append(*p, errors.New(name+" is required"))
	}
}

// RequireHTTPURL records "name must be an http(s) URL" unless raw is an
// absolute http or https URL with a host.
func (p *Problems) RequireHTTPURL(name, raw string) {
	if u, err := url.Parse(raw); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		*p = append(*p, errors.New(name+" must be an http(s) URL"))
	}
}
