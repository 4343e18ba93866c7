package platform

import "errors"

// Problems gathers what is wrong with a module's Deps or config, one error
// each, so that New reports them all at once (errors.Join(p...)).
type Problems []error

// Require records "name is required" unless present.
func (p *Problems) Require(name string, present bool) {
	if !present {
		*p = append(*p, errors.New(name+" is required"))
	}
}
