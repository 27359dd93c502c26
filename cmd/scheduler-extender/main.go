// Command scheduler-extender is a placeholder until its issue lands.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "scheduler-extender: not implemented")
	os.Exit(2)
}
