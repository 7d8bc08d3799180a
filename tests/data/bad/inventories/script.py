#!/usr/bin/env python3
# expect: the inventory is an executable script; dynamic inventory scripts are not supported (it was not run)
import json
print(json.dumps({"gpu": {"hosts": ["node1"]}}))
