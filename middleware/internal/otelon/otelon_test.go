package otelon

import (
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TestGlobal sets the global provider, so it is the only test of the
// package that reads it, and none runs in parallel with it.
func TestGlobal(t *testing.T) {
	if defaultGlobal == nil {
		t.Fatal("the global provider's placeholder type was not recognised; has go.opentelemetry.io/otel moved it?")
	}
	before := New(nil, "test")
	if GlobalSet() || before.On() {
		t.Fatal("no provider is set, yet tracing is on")
	}
	if n := testing.AllocsPerRun(100, func() { _ = before.On() }); n != 0 {
		t.Errorf("On allocates %v times", n)
	}
	if New(noop.NewTracerProvider(), "test").On() {
		t.Error("a no-op provider given: tracing is on")
	}
	given := sdktrace.NewTracerProvider()
	defer given.Shutdown(t.Context())
	if g := New(given, "test"); !g.On() {
		t.Error("a provider given: tracing is off")
	}

	old := otel.GetTracerProvider()
	defer otel.SetTracerProvider(old)
	otel.SetTracerProvider(given)
	if !GlobalSet() || !before.On() {
		t.Fatal("the global provider is set, yet tracing is off")
	}
	_, span := before.Start(t.Context(), "s")
	if !span.IsRecording() {
		t.Error("a tracer taken before the global was set does not follow it")
	}
	span.End()
	otel.SetTracerProvider(noop.NewTracerProvider())
	if GlobalSet() {
		t.Error("the global set to a no-op: GlobalSet is true")
	}
}
