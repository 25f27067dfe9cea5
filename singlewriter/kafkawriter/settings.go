package kafkawriter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/telemetry"
)

// settings are what both consumers share of their configuration, with the
// defaults filled in.
type settings struct {
	startOffset                                         int64
	batchSize                                           int
	batchWait                                           time.Duration
	maxAttempts                                         int
	retryBackoff, maxRetryBackoff                       time.Duration
	deadLetterTopic                                     string
	sessionTimeout, rebalanceTimeout, heartbeatInterval time.Duration
	dialer                                              *kafka.Dialer
	logger                                              *slog.Logger
}

// Defaults of the consumers' configurations.
const (
	DefaultBatchWait         = 10 * time.Millisecond
	DefaultMaxAttempts       = 5
	DefaultRetryBackoff      = 100 * time.Millisecond
	DefaultMaxRetryBackoff   = 5 * time.Second
	DefaultSessionTimeout    = 10 * time.Second
	DefaultRebalanceTimeout  = 10 * time.Second
	DefaultHeartbeatInterval = 250 * time.Millisecond
)

func (s settings) withDefaults() settings {
	if s.startOffset == 0 {
		s.startOffset = kafka.FirstOffset
	}
	if s.batchSize == 0 {
		s.batchSize = 1
	}
	if s.batchWait == 0 {
		s.batchWait = DefaultBatchWait
	}
	if s.maxAttempts == 0 {
		s.maxAttempts = DefaultMaxAttempts
	}
	if s.retryBackoff == 0 {
		s.retryBackoff = DefaultRetryBackoff
	}
	if s.maxRetryBackoff == 0 {
		s.maxRetryBackoff = max(DefaultMaxRetryBackoff, s.retryBackoff)
	}
	if s.sessionTimeout == 0 {
		s.sessionTimeout = DefaultSessionTimeout
	}
	if s.rebalanceTimeout == 0 {
		s.rebalanceTimeout = DefaultRebalanceTimeout
	}
	if s.heartbeatInterval == 0 {
		s.heartbeatInterval = DefaultHeartbeatInterval
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	return s
}

func (s settings) validate() error {
	var reason string
	switch {
	case s.startOffset != kafka.FirstOffset && s.startOffset != kafka.LastOffset:
		reason = fmt.Sprintf("start offset %d (want kafka.FirstOffset or kafka.LastOffset)", s.startOffset)
	case s.batchSize < 0 || s.maxAttempts < 0:
		reason = fmt.Sprintf("batch size %d and max attempts %d must not be negative", s.batchSize, s.maxAttempts)
	case s.batchWait < 0 || s.retryBackoff < 0 || s.sessionTimeout < 0 || s.rebalanceTimeout < 0 || s.heartbeatInterval < 0:
		reason = "negative duration"
	case s.maxRetryBackoff < s.retryBackoff:
		reason = fmt.Sprintf("max retry backoff %v below retry backoff %v", s.maxRetryBackoff, s.retryBackoff)
	case s.heartbeatInterval >= s.sessionTimeout:
		reason = fmt.Sprintf("heartbeat interval %v not below session timeout %v", s.heartbeatInterval, s.sessionTimeout)
	default:
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInvalid, reason)
}

// kafkaLogger sends kafka-go's messages to log at debug level.
func kafkaLogger(log *slog.Logger) kafka.Logger {
	return kafka.LoggerFunc(func(msg string, args ...any) { log.Debug(fmt.Sprintf(msg, args...)) })
}

// readerConfig configures the reader of partition p. The reader prefetches
// in the background into a queue that holds a whole batch, so that a batch
// is gathered from memory while the previous one is applied; a fetch
// returns as soon as the broker has anything (MinBytes 1) or after MaxWait.
// The reader's lag reports are off: nothing reads them, and each costs a
// request.
func (s settings) readerConfig(src Source, p int, log *slog.Logger) kafka.ReaderConfig {
	return kafka.ReaderConfig{
		Brokers: src.Brokers, Topic: src.Topic, Partition: p, Dialer: s.dialer,
		MaxWait: 500 * time.Millisecond, QueueCapacity: max(100, s.batchSize), ReadLagInterval: -1,
		ErrorLogger: kafkaLogger(log),
	}
}

// fetchBatch returns the next messages of r: one, waited for until ctx
// ends; then, for batches, what arrives within s.batchWait, up to
// s.batchSize.
func (s settings) fetchBatch(ctx context.Context, r *kafka.Reader) ([]kafka.Message, error) {
	m, err := r.FetchMessage(ctx)
	if err != nil {
		return nil, err
	}
	batch := []kafka.Message{m}
	if s.batchSize > 1 {
		wctx, cancel := context.WithTimeout(ctx, s.batchWait)
		defer cancel()
		for len(batch) < s.batchSize {
			m, err := r.FetchMessage(wctx)
			if err != nil {
				break // the wait is over; the message, if any, stays queued
			}
			batch = append(batch, m)
		}
	}
	return batch, nil
}

// attempt runs try on m until it succeeds or fails with an error that is
// not the handler's (returned as it is), retrying the handler's failures
// with doubling backoff and counting each in failed. After maxAttempts
// failures it sends m to the dead-letter topic and returns nil, or, without
// one, returns a *PoisonError; errDeadLettered tells the caller which.
func (s settings) attempt(ctx context.Context, log *slog.Logger, dlq *deadLetters, m kafka.Message, failed func(), try func() error) error {
	delay := s.retryBackoff
	for n := 1; ; n++ {
		err := try()
		if err == nil || !isHandlerError(err) {
			return err
		}
		failed()
		if n >= s.maxAttempts {
			return s.deadLetter(ctx, log, dlq, m, n, unwrapHandler(err))
		}
		log.Debug("kafkawriter: handler failed", telemetry.Offset, m.Offset, telemetry.Attempt, n, telemetry.Err(err))
		if !sleep(ctx, delay) {
			return ctx.Err()
		}
		delay = min(2*delay, s.maxRetryBackoff)
	}
}

// errDeadLettered reports that attempt sent the message to the dead-letter
// topic: the caller skips it.
var errDeadLettered = errors.New("kafkawriter: dead-lettered")

// deadLetter sends m to the dead-letter topic and returns errDeadLettered,
// or, without a topic, a *PoisonError. A send that fails for a transient
// reason (the network, a leader election) is retried until ctx ends; one the
// topic refuses for good (a permanent Kafka error) ends in a *PoisonError
// that names the refusal, since retrying it would hold the partition
// forever.
func (s settings) deadLetter(ctx context.Context, log *slog.Logger, dlq *deadLetters, m kafka.Message, attempts int, cause error) error {
	if dlq == nil {
		return &PoisonError{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Attempts: attempts, Err: cause}
	}
	log = log.With(telemetry.Offset, m.Offset)
	var refused error
	if !s.retry(ctx, log, "dead-letter", func() error {
		err := dlq.send(ctx, m, attempts, cause)
		if err != nil && permanent(err) && !failpoint.Mutant("kafkawriter.deadletter.permanent") {
			refused = err
			return nil
		}
		return err
	}) {
		return ctx.Err()
	}
	if refused != nil {
		log.Error("kafkawriter: the dead-letter topic refused a poison message; stopping", telemetry.Err(refused))
		return &PoisonError{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Attempts: attempts, Err: cause, DeadLetter: refused}
	}
	log.Warn("kafkawriter: dead-lettered a poison message", telemetry.Attempt, attempts, telemetry.Err(cause))
	return errDeadLettered
}

// permanent reports whether a write error is final: a Kafka error that the
// protocol does not mark retriable (a record too large, an authorization
// refused), or a record too large for the writer. Anything else (the
// network, a timeout, a leader moving) may pass.
func permanent(err error) bool {
	var tooLarge kafka.MessageTooLargeError
	var kerr kafka.Error
	return errors.As(err, &tooLarge) || errors.As(err, &kerr) && !kerr.Temporary()
}

// tooLarge reports whether a write was refused for the record's size.
func tooLarge(err error) bool {
	var tooLarge kafka.MessageTooLargeError
	return errors.As(err, &tooLarge) || errors.Is(err, kafka.MessageSizeTooLarge) || errors.Is(err, kafka.RecordListTooLarge)
}

// retry runs op until it succeeds (true) or ctx ends (false), with doubling
// backoff.
func (s settings) retry(ctx context.Context, log *slog.Logger, what string, op func() error) bool {
	delay := s.retryBackoff
	for {
		err := op()
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		log.Warn("kafkawriter: "+what+" failed; retrying", telemetry.Err(err))
		if !sleep(ctx, delay) {
			return false
		}
		delay = min(2*delay, s.maxRetryBackoff)
	}
}

// sleep waits d or until ctx ends; it reports whether the full d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// deadLetters writes poison messages to the dead-letter topic.
type deadLetters struct {
	w  *kafka.Writer
	tr *kafka.Transport
}

// newDeadLetters returns a writer to topic, or nil when topic is empty.
// Each dead letter is written alone (BatchSize 1), so that its size never
// gets another refused with it, and of any size (BatchBytes): kafka-go's own
// limit, 1 MiB by default, is below what a message near the broker's limit
// becomes with the dead-letter headers. The topic's limit
// (max.message.bytes) decides; send replaces a record it refuses for its
// size with a marker.
func newDeadLetters(brokers []string, topic string, dialer *kafka.Dialer) *deadLetters {
	if topic == "" {
		return nil
	}
	tr := dialerTransport(dialer)
	return &deadLetters{tr: tr, w: &kafka.Writer{
		Addr:         kafka.TCP(brokers...),
		Topic:        topic,
		RequiredAcks: kafka.RequireAll,
		BatchSize:    1,
		BatchBytes:   math.MaxInt32,
		BatchTimeout: time.Millisecond,
		Transport:    tr,
	}}
}

// dialerTransport is a kafka.Transport that connects as dialer does: its
// TLS, SASL and client ID, and its DialFunc, or else a net.Dialer with its
// timeout, local address, fallback delay and keep-alive (a nil dialer:
// kafka-go's defaults). Its Resolver, of another type than a Transport's,
// is not carried over: a DialFunc can resolve as it likes.
func dialerTransport(dialer *kafka.Dialer) *kafka.Transport {
	tr := &kafka.Transport{}
	if dialer == nil {
		return tr
	}
	tr.TLS, tr.SASL, tr.ClientID = dialer.TLS, dialer.SASLMechanism, dialer.ClientID
	tr.DialTimeout = dialer.Timeout
	tr.Dial = dialer.DialFunc
	if tr.Dial == nil {
		nd := &net.Dialer{Timeout: dialer.Timeout, LocalAddr: dialer.LocalAddr, FallbackDelay: dialer.FallbackDelay, KeepAlive: dialer.KeepAlive}
		tr.Dial = nd.DialContext
	}
	return tr
}

// send writes m with its key, value and headers, plus the headers saying
// where it came from and why it failed. When the topic refuses that record
// for its size, send writes a marker in its place: the key and those
// headers, with HeaderTruncated, without the value and m's own headers. The
// message itself stays in its topic, at the offset the headers name, until
// the topic's retention deletes it.
func (d *deadLetters) send(ctx context.Context, m kafka.Message, attempts int, cause error) error {
	headers := deadLetterHeaders(m, attempts, cause)
	err := d.write(ctx, kafka.Message{
		Key:     m.Key,
		Value:   m.Value,
		Headers: append(append([]kafka.Header(nil), m.Headers...), headers...),
	})
	if !tooLarge(err) {
		return err
	}
	return d.write(ctx, kafka.Message{
		Key:     m.Key,
		Headers: append(headers, kafka.Header{Key: HeaderTruncated, Value: []byte(strconv.Itoa(len(m.Value)))}),
	})
}

// deadLetterHeaders are the headers that say where m came from and why it
// failed.
func deadLetterHeaders(m kafka.Message, attempts int, cause error) []kafka.Header {
	reason := cause.Error()
	if len(reason) > 4096 {
		reason = reason[:4096]
	}
	return []kafka.Header{
		{Key: HeaderTopic, Value: []byte(m.Topic)},
		{Key: HeaderPartition, Value: []byte(strconv.Itoa(m.Partition))},
		{Key: HeaderOffset, Value: []byte(strconv.FormatInt(m.Offset, 10))},
		{Key: HeaderAttempts, Value: []byte(strconv.Itoa(attempts))},
		{Key: HeaderError, Value: []byte(reason)},
	}
}

// write writes one record, and returns its own error rather than kafka-go's
// list of one.
func (d *deadLetters) write(ctx context.Context, rec kafka.Message) error {
	err := d.w.WriteMessages(ctx, rec)
	var each kafka.WriteErrors
	if errors.As(err, &each) && len(each) == 1 && each[0] != nil {
		return each[0]
	}
	return err
}

func (d *deadLetters) close() {
	if d != nil {
		d.w.Close()
		d.tr.CloseIdleConnections()
	}
}
