// Package tracing sets up OpenTelemetry traces for the keeper: an OTLP
// (HTTP) exporter when keeper.yml names an endpoint, nothing otherwise,
// and the W3C trace context that carries a run's trace from the API
// request that made it into the queue job that executes it.
//
// Spans carry names, ids and outcomes only: never a command's text, a
// parameter, an input or an output, which may hold secrets.
package tracing

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Name is the instrumentation scope of every span Soul Stack makes.
const Name = "github.com/soulstack/soulstack"

// Attribute keys of Soul Stack's spans.
const (
	RunID   = attribute.Key("soulstack.run.id")
	RunName = attribute.Key("soulstack.run.name")
	RunMode = attribute.Key("soulstack.run.mode")
	Phase   = attribute.Key("soulstack.run.phase")
	Step    = attribute.Key("soulstack.step.name")
	Module  = attribute.Key("soulstack.step.module")
	SID     = attribute.Key("soulstack.soul.sid")
	Status  = attribute.Key("soulstack.target.status")
)

// Tracer returns Soul Stack's tracer: a no-op one until Setup installs
// an exporter.
func Tracer() trace.Tracer { return otel.Tracer(Name) }

var propagator = propagation.TraceContext{}

// Config is keeper.yml's tracing section.
type Config struct {
	// Endpoint is the OTLP/HTTP base URL (http://collector:4318); empty
	// means no traces.
	Endpoint string
	// SampleRatio is the share of runs traced (0 < r <= 1).
	SampleRatio float64
	// Service names the process (service.name).
	Service, Version, Instance string
}

// Setup installs the exporter and the trace-context propagator when
// c.Endpoint is set and returns the function that flushes and stops it;
// without an endpoint it installs nothing and shutdown does nothing.
func Setup(ctx context.Context, c Config) (shutdown func(context.Context) error, err error) {
	if c.Endpoint == "" {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(c.Endpoint+"/v1/traces"), otlptracehttp.WithTimeout(10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", c.Service), attribute.String("service.version", c.Version),
		attribute.String("service.instance.id", c.Instance)))
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	ratio := c.SampleRatio
	if ratio <= 0 || ratio > 1 {
		ratio = 1
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)), sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagator)
	return tp.Shutdown, nil
}

// Inject returns the W3C traceparent of ctx's span, "" when there is none.
func Inject(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c["traceparent"]
}

// Extract returns ctx carrying the remote span a traceparent names.
func Extract(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}
