"""A scripted OpenAI-compatible judge server on 127.0.0.1 (stdlib http.server), and its fixture."""
