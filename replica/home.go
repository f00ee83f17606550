package replica

import "github.com/kvrouter/kvrouter/kvindex"

// Home is a prefix's home pod as router replicas share it through an index
// shared by them (package redisindex): the prefix of namespace whose first
// block hashes to Block lives on Pod, its footprint Tokens prompt tokens,
// until Until (unix nanoseconds) unless a replica routes it again.
type Home struct {
	Namespace string
	Block     uint64
	Pod       kvindex.PodID
	Tokens    int64
	Until     int64
}

// HomeTail is a prompt that added to its prefix's footprint, as router
// replicas share it so that each counts the prompts every replica saw
// (package router's homes): the prefix of Namespace whose first block
// hashes to Block gained the prompt of Blocks blocks of BlockSize tokens
// whose every 16th block and last block hash to Signature.
type HomeTail struct {
	Namespace string
	Block     uint64
	Blocks    int
	BlockSize int
	Signature []uint64
}
