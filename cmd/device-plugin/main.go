// Command device-plugin is a placeholder until its issue lands.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "device-plugin: not implemented")
	os.Exit(2)
}
