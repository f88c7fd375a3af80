"""Gradio chat UI for rag (presentation only; calls the rag library)."""
