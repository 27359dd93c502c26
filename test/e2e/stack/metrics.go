package stack

// The components' /metrics endpoints, for tests that scrape them (the dashboard test's Prometheus).

// ExtenderMetricsURL is the extender's /metrics URL.
func (s *Stack) ExtenderMetricsURL() string { return s.ExtenderURL + "/metrics" }

// WebhookMetricsURL is the webhook's /metrics URL.
func (s *Stack) WebhookMetricsURL() string { return s.webhookMetrics }

// PluginMetricsURL is the /metrics URL of the device plugin on node ("" for a node the stack
// does not run).
func (s *Stack) PluginMetricsURL(node string) string { return s.pluginMetrics[node] }
