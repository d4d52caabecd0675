package gateway

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/protocol"
)

// metrics are the gateway's Prometheus series.
type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	refused  *prometheus.CounterVec
	inFlight prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runstate_gateway_requests_total",
			Help: "Calls served, by method and contract code (OK for success)."}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "runstate_gateway_request_duration_seconds",
			Help: "Time from a call's arrival to its answer, by method.", Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 12)}, []string{"method"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runstate_gateway_refused_total",
			Help: "Calls refused before reaching the store, by reason (UNAUTHENTICATED, PERMISSION_DENIED)."}, []string{"code"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "runstate_gateway_in_flight",
			Help: "Calls being served."}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.latency, m.refused, m.inFlight)
	}
	return m
}

// observe counts every call the store's service answers.
func (m *metrics) observe(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	m.inFlight.Inc()
	defer m.inFlight.Dec()
	start := time.Now()
	resp, err := handler(ctx, req)
	method := methodOf(info)
	m.latency.WithLabelValues(method).Observe(time.Since(start).Seconds())
	m.requests.WithLabelValues(method, codeLabel(err)).Inc()
	return resp, err
}

// codeLabel is the contract code of a call's outcome, read from the
// status the protocol answers with.
func codeLabel(err error) string {
	if err == nil {
		return "OK"
	}
	if code := runstate.CodeOf(protocol.FromStatus(err, "the store")); code != "" {
		return string(code)
	}
	return "UNKNOWN"
}
