"""Placeholder until the page of issue 14 lands (being built in this change)."""

import streamlit as st

from webapp import state

state.require_actor()
st.title("Qc")
st.info("This page is being built.")
