package config

import (
	"context"
	"os"
	"path/filepath"

	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Tracing returns a Temporal interceptor that traces workflows and activities
// with OpenTelemetry: to OTLP over HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is
// set, else to <home>/traces/<service>.jsonl. Span attributes carry the
// workflow IDs, which name the campaign, stage, step, task and attempt.
func Tracing(ctx context.Context, service string) (interceptor.Interceptor, func(context.Context) error, error) {
	var exp sdktrace.SpanExporter
	var err error
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" {
		exp, err = otlptracehttp.New(ctx)
	} else {
		dir := filepath.Join(Home(), "traces")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, nil, err
		}
		f, ferr := os.OpenFile(filepath.Join(dir, service+".jsonl"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if ferr != nil {
			return nil, nil, ferr
		}
		exp, err = stdouttrace.New(stdouttrace.WithWriter(f))
	}
	if err != nil {
		return nil, nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "t1flow-"+service))))
	ic, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{Tracer: tp.Tracer("t1flow")})
	if err != nil {
		return nil, nil, err
	}
	return ic, tp.Shutdown, nil
}
