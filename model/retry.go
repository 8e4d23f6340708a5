package model

import "time"

// RetryInfo describes one retry of a model request that failed before its
// stream started (HTTP 429, a 5xx, or a connection that failed before a
// response). Providers report it to their OnRetry hook, which is how the
// server counts retries in its metrics, and log it.
type RetryInfo struct {
	// Provider is the provider's name, e.g. "openai", "ollama", "anthropic".
	Provider string
	// Attempt counts retries from 1: Attempt 1 is the second request.
	Attempt int
	// Status is the HTTP status of the failed attempt, 0 when there was no
	// response (the connection failed).
	Status int
	// Wait is how long the provider waits before the retry: the server's
	// Retry-After when it sent one (capped), else a jittered backoff.
	Wait time.Duration
	// Err is the failure being retried.
	Err error
}

// Error is a model request that failed. Providers return it (possibly
// wrapped) from Stream for failures before any output and from Recv for a
// stream that broke, so that a run fails with a message that says what to
// fix, and so that callers can tell a bad key from an overloaded server.
type Error struct {
	// Provider is the provider's name, e.g. "openai".
	Provider string
	// Status is the HTTP status the provider answered with; 0 when the
	// failure was not an HTTP status (connection failure, broken stream).
	Status int
	// Retryable reports a transient failure before the stream started
	// (rate limit, server error, no connection): the same request may
	// succeed later. A provider has already spent its own retries when it
	// returns one. A failure after the stream started is never marked
	// retryable, since part of the reply may already have been shown.
	Retryable bool
	// Streaming marks a failure after the stream had started: output may
	// have been delivered and nothing was retried.
	Streaming bool
	// Message is the whole story for a person: what happened (with the
	// status and the provider's own explanation) and, where a setting is
	// the likely cause, which one to fix (e.g. "set OPENAI_API_KEY").
	Message string
	// Err is the underlying cause, kept for errors.Is and errors.As; its
	// text is already part of Message where it helps.
	Err error
}

func (e *Error) Error() string { return e.Provider + ": " + e.Message }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }
