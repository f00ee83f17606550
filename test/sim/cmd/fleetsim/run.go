package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/test/sim/fleetsim"
)

// scenario is one workload at one load level on one fleet.
type scenario struct {
	group  string // its workload (workloadNames): its report section
	output int    // output tokens per request of the shared-prefix workloads
	cfg    fleetsim.Config
	w      *fleetsim.Workload
	bound  []int
	// only, when set, are the policies to run: a repeat of a scenario
	// under another seed, for the acceptance lines only.
	only []string
	// base is the scenario a repeat repeats; nil for the original.
	base *scenario
	// share is the working set of the shared-prefix workloads over the
	// fleet's KV, of groups groups.
	share  float64
	groups int
	// sweep marks a shared-prefix-overload of a larger working set: it
	// appears in the sweep table only.
	sweep bool
	// topology names the fleet of a prefill-decode scenario: aggregated,
	// or P/D at a threshold.
	topology string
	// overload is the published run a cache-overload scenario plays.
	overload *overloadRun
	// noise: where llm-d-precise runs, fleetsim.PreciseShifted runs too,
	// for the acceptance lines only: how far a stage's p90 moves between
	// two runs of one policy.
	noise bool
}

// job is one scenario under one policy.
type job struct {
	sc     *scenario
	policy string
	stats  []fleetsim.Stats
	res    *fleetsim.Result
	wall   time.Duration
	err    error
}

// all is the job's statistics over every level of its run.
func (j *job) all() fleetsim.Stats { return j.stats[len(j.stats)-1] }

type options struct {
	traces, out, policies, workloads string
	seed                             uint64
	seeds                            int // the seeds the acceptance pools over, from seed (repeats)
	outputs                          string
	qpsScale                         float64
	parallel                         int
	quick                            bool
	client                           string
	concurrency                      int
	timeout                          time.Duration
	pdPrefill                        int
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	var o options
	fs := flag.NewFlagSet("fleetsim", flag.ContinueOnError)
	fs.StringVar(&o.traces, "traces", "../../testdata/traces", "folder of the Mooncake traces (the default: the repository's, from test/sim)")
	fs.StringVar(&o.out, "out", "../../results/sim", "folder for report.md and the plots (the default: the repository's results/sim, from test/sim)")
	fs.StringVar(&o.policies, "policies", strings.Join(fleetsim.Policies, ","), "policies to run")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of every random choice")
	fs.IntVar(&o.seeds, "seeds", 3, "seeds, from -seed on, that conversation at 3×, shared-prefix and shared-prefix-overload run kvrouter and llm-d precise under (and the oracle on conversation and shared-prefix), and heterogeneous-speeds its kvrouters and llm-d precise (its other policies: the first 3), pooled in the acceptance lines")
	fs.IntVar(&o.parallel, "parallel", runtime.GOMAXPROCS(0), "runs at a time")
	fs.StringVar(&o.workloads, "workloads", strings.Join(workloadNames, ","), "workloads to run, separated by commas: conversation (the Mooncake traces), shared-prefix (llm-d's shared-prefix run), shared-prefix-overload (its working set past the fleet's KV cache), prefill-decode (prefill/decode disaggregation against aggregated serving), cache-overload (llm-d's cache-overload runs), heterogeneous-speeds (half the pods at half speed: learned prefill speeds)")
	fs.StringVar(&o.outputs, "shared-output", sharedOutputs, "output tokens per request of the shared-prefix workloads: each value (comma separated) runs them once")
	fs.Float64Var(&o.qpsScale, "shared-qps-scale", sharedQPSScale, "simulated QPS per published QPS of the shared-prefix workloads")
	fs.BoolVar(&o.quick, "quick", false, "small scenarios only (seconds)")
	fs.StringVar(&o.client, "shared-client", "inference-perf", "load generator of the shared-prefix workloads: inference-perf (bounded concurrency, timeouts, each stage after the previous one drained) or open (open-loop arrivals)")
	fs.IntVar(&o.concurrency, "client-concurrency", -1, "inference-perf client's requests in flight (0: unbounded; default: the published client's, scaled like the stage rates)")
	fs.DurationVar(&o.timeout, "client-timeout", ipTimeout, "inference-perf client's request timeout (0: none)")
	fs.IntVar(&o.pdPrefill, "pd-prefill", pdPrefill, fmt.Sprintf("prefill pods of prefill-decode's P/D fleet of %d pods", pdPods))
	if err := fs.Parse(args); err != nil {
		return err
	}
	names, err := parseWorkloads(o.workloads)
	if err != nil {
		return err
	}
	o.workloads = strings.Join(names, ",")
	if o.seeds < 1 {
		return fmt.Errorf("-seeds %d: want 1 or more", o.seeds)
	}
	if o.pdPrefill < 1 || o.pdPrefill >= pdPods {
		return fmt.Errorf("-pd-prefill %d: want 1 to %d", o.pdPrefill, pdPods-1)
	}
	if o.client != "inference-perf" && o.client != "open" {
		return fmt.Errorf("-shared-client %q: want inference-perf or open", o.client)
	}
	if o.concurrency < 0 {
		o.concurrency = defaultConcurrency(o.qpsScale)
	}
	start := time.Now()
	hasher, err := blockhash.NewHasher(blockhash.DefaultConfig())
	if err != nil {
		return err
	}
	scs, err := scenarios(o, hasher)
	if err != nil {
		return err
	}
	var jobs []*job
	for _, sc := range scs {
		if !o.runs(sc.group) {
			continue
		}
		ps := runPolicies(strings.Split(o.policies, ","), sc.only)
		if sc.noise && slices.Contains(ps, "llm-d-precise") {
			ps = append(ps, fleetsim.PreciseShifted)
		}
		for _, p := range ps {
			jobs = append(jobs, &job{sc: sc, policy: p})
		}
	}
	runJobs(ctx, jobs, o.parallel, stdout)
	for _, j := range jobs {
		if j.err != nil {
			return fmt.Errorf("%s %s: %w", j.sc.w.Name, j.policy, j.err)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	if err := writeReport(filepath.Join(o.out, "report.md"), o, jobs, time.Since(start)); err != nil {
		return err
	}
	if err := writePlots(o.out, jobs); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s in %v\n", filepath.Join(o.out, "report.md"), time.Since(start).Round(time.Second))
	return nil
}

// runPolicies is the policies a scenario runs: those asked for, or of
// them those in only when only is set; and a variant of kvrouter in only
// (kvrouter-learned, kvrouter-mean: what heterogeneous-speeds compares)
// whenever kvrouter is asked for.
func runPolicies(asked, only []string) []string {
	if only == nil {
		return asked
	}
	var out []string
	for _, p := range asked {
		if slices.Contains(only, p) {
			out = append(out, p)
		}
	}
	if slices.Contains(asked, "kvrouter") {
		for _, p := range only {
			if strings.HasPrefix(p, "kvrouter-") && !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// runJobs runs jobs, parallel at a time, stopping early when ctx ends.
func runJobs(ctx context.Context, jobs []*job, parallel int, stdout io.Writer) {
	ch := make(chan *job)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range max(parallel, 1) {
		wg.Go(func() {
			for j := range ch {
				t := time.Now()
				newPolicy, err := fleetsim.PolicyByName(j.policy)
				if err == nil {
					j.res, err = fleetsim.Run(j.sc.cfg, j.sc.w, newPolicy)
				}
				j.err, j.wall = err, time.Since(t)
				if err == nil {
					j.stats = fleetsim.Summarize(j.sc.w, j.res, j.sc.bound)
				}
				mu.Lock()
				if err == nil {
					all := j.all()
					name := j.sc.w.Name
					if t := j.sc.topology; t != "" {
						name += ", " + t
					}
					fmt.Fprintf(stdout, "%-28s %-13s p90 %8.2fs mean %8.2fs hit %5.1f%% %7.0f tok/s  (%v)\n",
						name, j.policy, all.P90, all.Mean, 100*all.HitRatio, all.OutputTPS, j.wall.Round(time.Millisecond))
				}
				mu.Unlock()
			}
		})
	}
	for _, j := range jobs {
		if ctx.Err() != nil {
			break
		}
		ch <- j
	}
	close(ch)
	wg.Wait()
}
