//go:build amd64 || arm64

package kvindex

// prefetch asks the processor to bring the cache line at p into its
// caches; it reads nothing and never faults.
//
//go:noescape
func prefetch(p *slot)
