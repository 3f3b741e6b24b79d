"""Integrations with the frameworks teams already run: Celery (`zsched.integrations.celery`),
Django's tasks framework (`zsched.integrations.django`) and Starlette/FastAPI
(`zsched.integrations.starlette`). Each is an optional extra (`zsched[celery]`, ...) and is
imported only when used: nothing here is imported by `import zsched`.
"""
