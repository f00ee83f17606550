// Package tracing sets kvrouter up as an OpenTelemetry tracer: spans
// exported over OTLP (gRPC or HTTP/protobuf), configured by the standard
// OTEL_* environment, and W3C trace context read from requests and written
// to the pods' requests.
//
// Off (the default), the global tracer provider stays OpenTelemetry's no-op
// one: starting a span costs a few nanoseconds and records nothing.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Settings is the tracing section of kvrouter's config file.
type Settings struct {
	// Enabled exports spans; the OTEL_* environment says where and how
	// (Protocol).
	Enabled bool `yaml:"enabled"`
}

// on is whether Start installed an exporting provider that has not been
// stopped.
var on atomic.Bool

// On reports whether spans are exported: callers skip tracing work
// altogether while it is not.
func On() bool { return on.Load() }

// Protocol is the OTLP protocol the environment asks for:
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL, else
// grpc (the OTLP/gRPC port, 4317, is what the picker charts point
// OTEL_EXPORTER_OTLP_ENDPOINT at). An unknown one is an error.
func Protocol() (string, error) {
	p := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if p == "" {
		p = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch p {
	case "", "grpc":
		return "grpc", nil
	case "http/protobuf":
		return p, nil
	}
	return "", fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: kvrouter exports grpc or http/protobuf", p)
}

// Start installs the global tracer provider and propagator when s.Enabled:
// an OTLP exporter of the protocol the environment asks for, batching
// spans; the resource is service.name kvrouter (OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES win) and service.version version; the sampler is
// OTEL_TRACES_SAMPLER's (the SDK's default: parent-based, always on). The
// returned stop puts the no-op provider back, then flushes and shuts the
// exporter down. Not enabled, it
// changes nothing and stop does nothing.
func Start(ctx context.Context, s Settings, version string) (stop func(context.Context) error, err error) {
	nothing := func(context.Context) error { return nil }
	if !s.Enabled {
		return nothing, nil
	}
	proto, err := Protocol()
	if err != nil {
		return nothing, err
	}
	var client otlptrace.Client
	if proto == "grpc" {
		client = otlptracegrpc.NewClient()
	} else {
		client = otlptracehttp.NewClient()
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nothing, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "kvrouter"), attribute.String("service.version", version)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nothing, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	uninstall := Install(tp)
	return func(ctx context.Context) error {
		uninstall()
		return tp.Shutdown(ctx)
	}, nil
}

// Install makes tp the global tracer provider, with the W3C trace context
// and baggage propagators, and turns On; uninstall puts the no-op provider
// back and turns it off. Start installs its exporting provider; tests and
// benchmarks install their own.
func Install(tp trace.TracerProvider) (uninstall func()) {
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	on.Store(true)
	return func() {
		on.Store(false)
		otel.SetTracerProvider(noop.NewTracerProvider())
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	}
}

// Describe says where spans go, for the start log.
func Describe() string {
	proto, _ := Protocol()
	endpoint := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		endpoint = os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	if endpoint == "" {
		endpoint = map[string]string{"grpc": "localhost:4317", "http/protobuf": "http://localhost:4318"}[proto]
	}
	return strings.TrimSpace(proto + " " + endpoint)
}
