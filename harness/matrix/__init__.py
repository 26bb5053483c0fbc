"""The compatibility matrix over engine releases, and bisecting it.

`harness lock` writes a hashed lock for one release (lock.py); a matrix spec names a manifest template and the
releases (spec.py); one cell per release launches that release once and records its observables (cell.py); the rows
(conformance cases, metric families, wire keys, flags) and the release where each first changed are pure functions of
the cells (observe.py), rendered as JSON, Markdown and an offline HTML page (render.py); `harness bisect` searches the
releases for the first change of one observable, running only the cells it needs (bisect.py). Cells run in the harness's process, or as Ray tasks on a cluster
(executors.py); `--emit k8s-job` writes a Kubernetes Indexed Job of `--cell-index` pods (k8s.py), and `--collect`
merges cells made elsewhere by the reuse rules (collect.py).
"""
