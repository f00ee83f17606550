// Package kvindex computes vLLM's prefix-cache block hashes and keeps the index
// from block hash to the pods (and cache tiers) that hold the block.
package kvindex
