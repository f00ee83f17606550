package replica

// PodLoad is the prefill other router replicas routed to a pod and that is
// not done yet, as an index shared by the replicas reports it (package
// redisindex); the memory backend has no other replicas.
type PodLoad struct {
	PrefillTokens int64 // uncached prompt tokens weighed by their context, as fleet.Load counts them
	Prefilling    int64 // requests not yet prefilled
}
