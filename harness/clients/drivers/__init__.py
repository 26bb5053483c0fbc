"""Driver scripts: data the harness runs with each client's own interpreter (harness.clients.run), never imported by
the harness."""
