package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/tracker"
)

// metrics are the Prometheus series a process exposes at /metrics (serve,
// and a worker given --metrics-addr). docs/demo-runner.md lists them; a
// test scrapes and parses every one.
type metrics struct {
	reg            *prometheus.Registry
	recovered      *prometheus.CounterVec
	recoveryTime   prometheus.Histogram
	transitions    *prometheus.CounterVec
	runDuration    *prometheus.HistogramVec
	renewFailures  prometheus.Counter
	renewLate      prometheus.Counter
	leasesLost     prometheus.Counter
	claimLatency   *prometheus.HistogramVec
	webhookAttempt *prometheus.CounterVec
}

// Claim results, the label of runstate_claim_duration_seconds.
const (
	claimClaimed = "claimed"
	claimEmpty   = "empty" // nothing was runnable
	claimError   = "error"
)

func newMetrics() *metrics {
	latency := prometheus.ExponentialBuckets(0.0005, 2, 14) // 0.5 ms to 4 s
	m := &metrics{reg: prometheus.NewRegistry(),
		recovered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runstate_recovery_runs_total",
			Help: "Runs crash recovery considered, by outcome (interrupted, failed, requeued, skipped)."}, []string{"outcome"}),
		recoveryTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "runstate_recovery_duration_seconds",
			Help: "How long crash recovery took.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runstate_run_status_changes_total",
			Help: "Run state changes this process wrote (runs it created, executed or an operator moved), by resulting status."}, []string{"status"}),
		runDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "runstate_run_duration_seconds",
			Help:    "Time from a run's creation to its terminal status, for runs this process ended, by status.",
			Buckets: prometheus.ExponentialBuckets(0.1, 3, 12)}, []string{"status"}), // 0.1 s to about 5 h
		renewFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "runstate_lease_renew_failures_total",
			Help: "Lease renewals that failed: refused (the lease was lost) or not answered (retried at the next tick)."}),
		renewLate: prometheus.NewCounter(prometheus.CounterOpts{Name: "runstate_lease_renewals_late_total",
			Help: "Lease renewals the store accepted after the lease had expired (nobody had claimed the run meanwhile): a sign that --lease is too short for this worker's pauses (docs/leases.md)."}),
		leasesLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "runstate_leases_lost_total",
			Help: "Runs this worker stopped because another worker or recovery took them: its lease had lapsed and was claimed."}),
		claimLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "runstate_claim_duration_seconds",
			Help: "How long a worker's claim-next call took, by result (claimed, empty, error).", Buckets: latency}, []string{"result"}),
		webhookAttempt: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runstate_webhook_deliveries_total",
			Help: "Webhook delivery attempts, by outcome (delivered, retrying, dead_lettered)."}, []string{"outcome"}),
	}
	m.reg.MustRegister(m.recovered, m.recoveryTime, m.transitions, m.runDuration, m.renewFailures, m.renewLate, m.leasesLost, m.claimLatency,
		m.webhookAttempt, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Every series exists from the start, at 0: a dashboard or an alert on
	// a series that has not happened yet sees 0, not nothing.
	for _, outcome := range []runstate.RecoveryOutcome{runstate.OutcomeInterrupted, runstate.OutcomeFailed, runstate.OutcomeRequeued, runstate.OutcomeSkipped} {
		m.recovered.WithLabelValues(string(outcome))
	}
	for _, status := range runstate.RunStatuses() {
		m.transitions.WithLabelValues(string(status))
		if status.Terminal() {
			m.runDuration.WithLabelValues(string(status))
		}
	}
	for _, result := range []string{claimClaimed, claimEmpty, claimError} {
		m.claimLatency.WithLabelValues(result)
	}
	for _, outcome := range []tracker.DeliveryOutcome{tracker.Delivered, tracker.Retrying, tracker.DeadLettered} {
		m.webhookAttempt.WithLabelValues(string(outcome))
	}
	return m
}

func (m *metrics) observeRecovery(r runstate.RecoveryReport) {
	m.recovered.WithLabelValues(string(runstate.OutcomeInterrupted)).Add(float64(r.Interrupted))
	m.recovered.WithLabelValues(string(runstate.OutcomeFailed)).Add(float64(r.Failed))
	m.recovered.WithLabelValues(string(runstate.OutcomeRequeued)).Add(float64(r.Requeued))
	m.recovered.WithLabelValues(string(runstate.OutcomeSkipped)).Add(float64(r.Skipped))
	m.recoveryTime.Observe(r.Duration.Seconds())
}

// Notify counts state changes (metrics is a tracker.Notifier).
func (m *metrics) Notify(ev tracker.Event) { m.transitions.WithLabelValues(ev.Status).Inc() }

// observeFinished records the duration of a run this process ended.
func (m *metrics) observeFinished(run runstate.RunSnapshot) {
	if run.Status.Terminal() && !run.FinishedAt.IsZero() {
		m.runDuration.WithLabelValues(string(run.Status)).Observe(run.FinishedAt.Sub(run.CreatedAt).Seconds())
	}
}

func (m *metrics) observeClaim(result string, took time.Duration) {
	m.claimLatency.WithLabelValues(result).Observe(took.Seconds())
}

func (m *metrics) observeDelivery(o tracker.DeliveryOutcome) {
	m.webhookAttempt.WithLabelValues(string(o)).Inc()
}

// storeGauges adds the series read from the store and the dead-letter file
// at each scrape: runs by status (the statuses that have not finished, whose
// count follows the live runs, not the history) and dead letters on file.
func (m *metrics) storeGauges(store runstate.RunStateStore, dead *tracker.FileDeadLetters) {
	m.reg.MustRegister(&storeCollector{store: store, dead: dead,
		runs: prometheus.NewDesc("runstate_runs", "Runs in the store that have not finished, by status (counted up to "+
			"100000 per status at each scrape).", []string{"status"}, nil),
		deadLetters: prometheus.NewDesc("runstate_webhook_dead_letters", "Webhook notifications on file that could not be delivered "+
			"(demo-runner deadletters lists them).", nil, nil),
		failures: prometheus.NewDesc("runstate_store_scrape_errors", "1 when the last scrape could not count the runs (the store did not answer).", nil, nil),
	})
}

// runsCountLimit bounds the runs a count reads: a scrape's per status,
// GET /counts's in all.
const runsCountLimit = 100000

type storeCollector struct {
	store                       runstate.RunStateStore
	dead                        *tracker.FileDeadLetters
	runs, deadLetters, failures *prometheus.Desc
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.runs
	ch <- c.deadLetters
	ch <- c.failures
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	failed := 0.0
	for _, status := range runstate.RunStatuses() {
		if status.Terminal() {
			continue
		}
		n, err := c.count(ctx, status)
		if err != nil {
			failed = 1
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.runs, prometheus.GaugeValue, float64(n), string(status))
	}
	ch <- prometheus.MustNewConstMetric(c.failures, prometheus.GaugeValue, failed)
	if list, err := c.dead.List(); err == nil {
		ch <- prometheus.MustNewConstMetric(c.deadLetters, prometheus.GaugeValue, float64(len(list)))
	}
}

func (c *storeCollector) count(ctx context.Context, status runstate.RunStatus) (int, error) {
	n, cursor := 0, ""
	for n < runsCountLimit {
		page, err := c.store.ListRuns(ctx, runstate.ListRunsParams{Statuses: []string{string(status)}, Limit: runstate.MaxPageLimit, Cursor: cursor})
		if err != nil {
			return n, err
		}
		n += len(page.Runs)
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	return n, nil
}

// observeRenewal counts a renewal that failed or came late.
func (m *metrics) observeRenewal(r tracker.Renewal) {
	if r.Err != nil {
		m.renewFailures.Inc()
	}
	if r.Late > 0 {
		m.renewLate.Inc()
	}
}
