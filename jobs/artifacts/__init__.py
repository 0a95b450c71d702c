"""Artifacts of jobs: code ZIPs going in, result files coming out (docs/artifacts.md).

`storage` reaches the artifact store, `code` checks and stores uploads, `tokens` signs the per-attempt
credentials pods use, `pod_views` are the endpoints pods call and `api` the ones users call.
"""
