package telemetrytest

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// Span is an ended span as recorded. Links and timestamps are not
// recorded.
type Span struct {
	Name        string
	Scope       string            // the tracer's instrumentation scope
	SpanContext trace.SpanContext // unique span ID; trace ID of its root
	Parent      trace.SpanContext // invalid for a root span
	Attributes  []attribute.KeyValue
	Status      Status
	Events      []Event
}

// Status is a span's status; Description is set only with codes.Error.
type Status struct {
	Code        codes.Code
	Description string
}

// Event is an event added to a span; RecordError adds one named
// "exception" with exception.type and exception.message.
type Event struct {
	Name       string
	Attributes []attribute.KeyValue
}

type tracerProvider struct {
	embedded.TracerProvider
	tel *Telemetry
}

func (p tracerProvider) Tracer(name string, _ ...trace.TracerOption) trace.Tracer {
	return tracer{tel: p.tel, scope: name}
}

type tracer struct {
	embedded.Tracer
	tel   *Telemetry
	scope string
}

// Start starts a span below ctx's span, unless trace.WithNewRoot, and
// returns a context that carries it.
func (tr tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	c := trace.NewSpanStartConfig(opts...)
	parent := trace.SpanContextFromContext(ctx)
	if c.NewRoot() {
		parent = trace.SpanContext{}
	}
	s := &span{tel: tr.tel, rec: Span{Name: name, Scope: tr.scope, Parent: parent}}
	s.rec.SpanContext = tr.tel.newSpanContext(parent)
	s.SetAttributes(c.Attributes()...)
	return trace.ContextWithSpan(ctx, s), s
}

// newSpanContext returns a new span ID, in parent's trace if it is valid.
func (tel *Telemetry) newSpanContext(parent trace.SpanContext) trace.SpanContext {
	tel.mu.Lock()
	tel.ids++
	id := tel.ids
	tel.mu.Unlock()
	var sid trace.SpanID
	binary.BigEndian.PutUint64(sid[:], id)
	tid := parent.TraceID()
	if !parent.IsValid() {
		binary.BigEndian.PutUint64(tid[8:], id)
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
}

// span is a span being recorded; every field but rec.SpanContext is
// guarded by tel.mu. Once ended, it ignores every change, as the SDK's
// spans do.
type span struct {
	embedded.Span
	tel   *Telemetry
	rec   Span
	ended bool
}

func (s *span) End(...trace.SpanEndOption) {
	s.tel.mu.Lock()
	defer s.tel.mu.Unlock()
	if !s.ended {
		s.ended = true
		s.tel.ended = append(s.tel.ended, s.rec)
	}
}

func (s *span) AddEvent(name string, opts ...trace.EventOption) {
	c := trace.NewEventConfig(opts...)
	a := c.Attributes()
	s.tel.mu.Lock()
	defer s.tel.mu.Unlock()
	if !s.ended {
		s.rec.Events = append(s.rec.Events, Event{Name: name, Attributes: a})
	}
}

func (s *span) AddLink(trace.Link) {}

func (s *span) IsRecording() bool {
	s.tel.mu.Lock()
	defer s.tel.mu.Unlock()
	return !s.ended
}

func (s *span) RecordError(err error, opts ...trace.EventOption) {
	if err == nil {
		return
	}
	s.AddEvent("exception", append(opts, trace.WithAttributes(
		attribute.String("exception.type", fmt.Sprintf("%T", err)),
		attribute.String("exception.message", err.Error())))...)
}

func (s *span) SpanContext() trace.SpanContext { return s.rec.SpanContext }

// SetStatus keeps the SDK's order: Ok is final, Error overrides Unset.
func (s *span) SetStatus(code codes.Code, description string) {
	s.tel.mu.Lock()
	defer s.tel.mu.Unlock()
	if s.ended || s.rec.Status.Code > code {
		return
	}
	s.rec.Status = Status{Code: code}
	if code == codes.Error {
		s.rec.Status.Description = description
	}
}

func (s *span) SetName(name string) {
	s.tel.mu.Lock()
	defer s.tel.mu.Unlock()
	if !s.ended {
		s.rec.Name = name
	}
}

// SetAttributes keeps the last value of each key, in the order keys were
// first set.
func (s *span) SetAttributes(kv ...attribute.KeyValue) {
	s.tel.mu.Lock()
	defer s.tel.mu.Unlock()
	if s.ended {
		return
	}
	for _, a := range kv {
		if i := slices.IndexFunc(s.rec.Attributes, func(b attribute.KeyValue) bool { return b.Key == a.Key }); i >= 0 {
			s.rec.Attributes[i] = a
		} else {
			s.rec.Attributes = append(s.rec.Attributes, a)
		}
	}
}

func (s *span) TracerProvider() trace.TracerProvider { return tracerProvider{tel: s.tel} }
