// Command webhook is a placeholder until its issue lands.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "webhook: not implemented")
	os.Exit(2)
}
