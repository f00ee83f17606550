// Package fleet is the router's view of the vLLM pods: which pods serve which
// model names, which are ready, and how loaded each one is, from the
// requests the router sent there and from each pod's vLLM /metrics, which a
// Scraper reads.
//
// A Fleet is updated by the pod sources (Upsert, Remove) and read by every
// routing decision through an immutable Snapshot, so reads take no lock.
package fleet
