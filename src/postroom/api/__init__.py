"""The REST API (FastAPI on uvicorn): see docs/api.md."""
