"""Gradio chat UI for rag (presentation only; calls the rag library).

Imported as rag.ui: rag/ui is a link to this folder, so a checkout and an installed wheel (which
holds these files in rag/ui, pyproject.toml) import the same name, and nothing named plain `ui`
is installed beside other packages.
"""
