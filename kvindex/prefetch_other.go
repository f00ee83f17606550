//go:build !amd64 && !arm64

package kvindex

// prefetch does nothing where kvrouter has no prefetch instruction.
func prefetch(*slot) {}
