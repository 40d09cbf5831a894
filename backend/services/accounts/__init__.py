"""Accounts: users and passwords (auth), logged-in browsers (sessions), what an account does in
its studies (roles), and the demo's accounts and seeding (demo_accounts, seed)."""
