// Package deployments holds deployment records, the Engine interface that runs
// their workflows, the Runtime interface that does the work of each step, the
// log store and the SSE log route. Engines and runtimes live in sub-packages.
package deployments
