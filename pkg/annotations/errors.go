package annotations

import (
	"errors"
	"fmt"
)

// ErrUnsupportedVersion is wrapped by decoders that meet a record of an unknown major version.
var ErrUnsupportedVersion = errors.New("unsupported version")

// Error is a parse or validation error about one annotation or resource. Its message names the key
// and the offending value, e.g. `nvidia.com/gpumem-percentage: 140 is above 100`.
type Error struct {
	// Container is the container the value belongs to, empty for pod annotations.
	Container string
	// Key is the annotation key or resource name.
	Key string
	// Reason says what is wrong, quoting the value.
	Reason string
	// Err is an underlying cause, if any.
	Err error
}

func (e *Error) Error() string {
	if e.Container != "" {
		return fmt.Sprintf("container %q: %s: %s", e.Container, e.Key, e.Reason)
	}
	return e.Key + ": " + e.Reason
}

func (e *Error) Unwrap() error { return e.Err }

func errorf(key, format string, args ...any) *Error {
	return &Error{Key: key, Reason: fmt.Sprintf(format, args...)}
}
