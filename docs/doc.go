// Package docs holds Cardinal's guides, one Markdown page per task. It has no code: its test checks
// that every relative link of README.md, the chart's README and these pages resolves.
package docs
