package logging

import "os"

// stderr writes to the process's standard error as it is at write time.
type stderr struct{}

func (stderr) Write(p []byte) (int, error) { return os.Stderr.Write(p) }
