// Package otelon tells whether an OpenTelemetry tracer would record
// anything, so that instrumentation costs nothing until an application
// sets a provider. The verifier and package middleware/telemetry share it.
package otelon

import (
	"reflect"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Tracer is the tracer of an instrumentation scope, from a provider given
// by configuration or, when none was, from the global one.
type Tracer struct {
	trace.Tracer
	global bool // no provider was given: follow the global one
	off    bool // the provider given is a no-op
}

// New returns the tracer named scope of tp; with tp nil, of the global
// provider, which forwards to a provider an application sets later.
func New(tp trace.TracerProvider, scope string, opts ...trace.TracerOption) Tracer {
	t := Tracer{global: tp == nil}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if _, ok := tp.(noop.TracerProvider); ok && !t.global {
		t.off = true
	}
	t.Tracer = tp.Tracer(scope, opts...)
	return t
}

// On reports whether spans started now could be recorded: a provider was
// given (and is not a no-op), or the global one has been set. Starting a
// span with the global provider unset allocates for nothing, so callers
// skip it.
func (t Tracer) On() bool {
	if t.off {
		return false
	}
	return !t.global || GlobalSet()
}

// defaultGlobal is the type of the global provider before any is set: an
// unexported placeholder in go.opentelemetry.io/otel/internal/global that
// forwards to the provider set later. Nil if one was set before this
// package was initialized (it is then never the placeholder again).
var defaultGlobal = func() reflect.Type {
	t := reflect.TypeOf(otel.GetTracerProvider())
	if t.Kind() == reflect.Pointer && t.Elem().PkgPath() == "go.opentelemetry.io/otel/internal/global" {
		return t
	}
	return nil
}()

// GlobalSet reports whether an application has set the global
// TracerProvider to one that records (not a no-op). It does not allocate.
func GlobalSet() bool {
	tp := otel.GetTracerProvider()
	if _, ok := tp.(noop.TracerProvider); ok {
		return false
	}
	return defaultGlobal == nil || reflect.TypeOf(tp) != defaultGlobal
}
