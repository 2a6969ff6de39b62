"""flows: Prefect 3 flows and deployments chaining bloomdata and bloomtrain, from corpus to trained model.

The only package that imports prefect. Flows are thin (the work is in bloomdata and bloomtrain): they add
retries, skip-when-done stage markers (``stages``), artifacts, a process-group-owning launcher for training
jobs (``launch``) and deployments (``serve``, prefect.yaml). ``python -m flows.demo`` runs it all; see
docs/flows.md.
"""
