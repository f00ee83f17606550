// Package replica is the state each router replica shares with the others:
// the prefill it routed to a pod and that is not done yet (PodLoad), and
// where each prompt prefix lives (Home) with the prompts that grew its
// footprint (HomeTail). It holds the types only; whoever consumes a share
// declares its interface. The router reads the other replicas' prefill
// through router.LoadSharer, which package redisindex (kvindex/redisindex)
// implements over Redis; redisindex carries the router's homes between
// the replicas through redisindex.HomeTable, which the router implements.
// The block index itself (package kvindex) knows nothing of replicas.
package replica
