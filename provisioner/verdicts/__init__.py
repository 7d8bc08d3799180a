"""The verdict vocabulary, below both judge/ (which reaches verdicts) and reports/ (which
writes them out): checks.py (Check: pass, fail or skip, with a reason) and diagnosis.py
(HostDiagnosis and its Findings)."""
