"""The run's report and its renderings: the Report model with its JSON form (report),
the terminal table (table), JUnit XML (junit), one HTML page (html), and the monitoring
configuration rendered from a profile and inventory (monitoring)."""
