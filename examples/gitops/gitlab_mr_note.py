#!/usr/bin/env python3
"""Post a Markdown report on the GitLab merge request of this pipeline, updating the note posted before.

Used by gitlab-ci.yml after check_diff_report.py: one note per merge request, replaced on every push, found by the
marker check_diff_report.py puts on its first line. GitLab's CI job token cannot write notes, so it takes a project
access token (role Reporter, scope api) from the environment variable FLEET_GITLAB_TOKEN: never on a command line.
Everything else comes from GitLab's predefined variables. Standard library only.

    python3 examples/gitops/gitlab_mr_note.py preview/report.md
"""

from __future__ import annotations

import json
import os
import sys
import urllib.parse
import urllib.request
from pathlib import Path

MARKER = "<!-- vllm-fleet:check-diff -->"
MAX_PAGES = 20  # 2,000 notes: enough for any merge request this is used on


def api(method: str, url: str, token: str, body: dict[str, str] | None = None) -> object:
    """One call of GitLab's REST API with the token in its header; return the decoded JSON answer."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"PRIVATE-TOKEN": token, "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read() or b"null")


def upsert_note(api_url: str, project: str, mr_iid: str, token: str, body: str) -> str:
    """Update the merge request's note that starts with the marker, or create one; return 'updated' or 'created'."""
    base = f"{api_url.rstrip('/')}/projects/{urllib.parse.quote(project, safe='')}/merge_requests/{mr_iid}/notes"
    for page in range(1, MAX_PAGES + 1):
        notes = api("GET", f"{base}?per_page=100&page={page}&sort=asc", token)
        assert isinstance(notes, list)
        for note in notes:
            if not note.get("system") and str(note.get("body", "")).startswith(MARKER):
                api("PUT", f"{base}/{note['id']}", token, {"body": body})
                return "updated"
        if len(notes) < 100:
            break
    api("POST", base, token, {"body": body})
    return "created"


def main(argv: list[str] | None = None) -> int:
    """Post the report file given as the only argument; exit 0 with a notice when there is nothing to post to."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: gitlab_mr_note.py REPORT.md", file=sys.stderr)
        return 2
    token = os.environ.get("FLEET_GITLAB_TOKEN", "")
    mr_iid = os.environ.get("CI_MERGE_REQUEST_IID", "")
    if not token or not mr_iid:
        print("gitlab_mr_note: no FLEET_GITLAB_TOKEN or not a merge request pipeline: the report stays in the artifact")
        return 0
    body = Path(args[0]).read_text()
    outcome = upsert_note(os.environ["CI_API_V4_URL"], os.environ["CI_PROJECT_ID"], mr_iid, token, body)
    print(f"gitlab_mr_note: {outcome} the preview note on merge request !{mr_iid}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
