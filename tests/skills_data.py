"""Five agents that differ only in their skills, and paraphrased requests for each (tests and bench)."""

from __future__ import annotations

SKILLS: dict[str, dict[str, object]] = {
    "billing": {
        "name": "Billing and refunds",
        "description": "Answers questions about invoices, charges, payments and refunds on a customer's account.",
        "tags": ["billing", "invoice", "refund", "payment"],
        "examples": ["Why was I charged twice?", "Can I get a copy of my invoice?", "I want my money back"],
    },
    "shipping": {
        "name": "Delivery tracking",
        "description": "Tracks parcels and deliveries: where an order is, when the courier comes, lost packages.",
        "tags": ["shipping", "delivery", "parcel", "tracking"],
        "examples": ["Where is my package?", "When will my order arrive?", "The courier never came"],
    },
    "hr": {
        "name": "People and HR",
        "description": "Holiday leave, payroll, employee benefits, hiring and onboarding questions from staff.",
        "tags": ["hr", "leave", "payroll", "benefits"],
        "examples": ["How many vacation days do I have left?", "When is payday?", "How do I add my partner to the health plan?"],
    },
    "it-support": {
        "name": "IT helpdesk",
        "description": "Fixes computer problems: passwords and logins, laptops, VPN, email and software installation.",
        "tags": ["it", "password", "laptop", "vpn"],
        "examples": ["I can't log in to my account", "My laptop won't turn on", "Please install Photoshop on my computer"],
    },
    "legal": {
        "name": "Contracts and compliance",
        "description": "Reviews contracts, NDAs and terms of service, and answers compliance and privacy-law questions.",
        "tags": ["legal", "contract", "nda", "gdpr"],
        "examples": ["Can you review this NDA?", "Is this clause enforceable?", "Do we comply with GDPR?"],
    },
}

REQUESTS: list[tuple[str, str]] = [
    ("billing", "My card was billed two times for the same order this month."),
    ("billing", "Please send me the receipt for my last purchase."),
    ("billing", "I returned the item three weeks ago and still haven't been refunded."),
    ("billing", "There is a charge on my statement that I don't recognise."),
    ("billing", "How do I change the credit card you charge every month?"),
    ("billing", "The price on my bill is higher than what I was quoted."),
    ("billing", "Can I pay the outstanding balance in instalments?"),
    ("shipping", "My parcel still hasn't shown up, it was due on Monday."),
    ("shipping", "Which day is the delivery van coming to my address?"),
    ("shipping", "The tracking number you gave me doesn't work."),
    ("shipping", "The box was left at the wrong house by the driver."),
    ("shipping", "Can you ship my order to my office instead of my home?"),
    ("shipping", "How long does shipping to Canada take?"),
    ("shipping", "My shipment seems to be stuck at the depot."),
    ("hr", "I'd like to book two weeks off in August."),
    ("hr", "My salary slip shows the wrong number of overtime hours."),
    ("hr", "What is the company's parental leave policy?"),
    ("hr", "We need to hire two new engineers for the team."),
    ("hr", "How do I enrol in the pension scheme?"),
    ("hr", "A new colleague starts Monday, what does onboarding involve?"),
    ("hr", "Can I work from home on Fridays according to the staff handbook?"),
    ("it-support", "I forgot my password and I'm locked out."),
    ("it-support", "The VPN disconnects every few minutes when I work from home."),
    ("it-support", "My screen keeps flickering and the computer freezes."),
    ("it-support", "Outlook won't sync my email since this morning."),
    ("it-support", "I need admin rights to install a printer driver."),
    ("it-support", "The wifi in meeting room 3 is not working."),
    ("it-support", "My keyboard stopped responding after the update."),
    ("legal", "Could someone look over the supplier agreement before we sign it?"),
    ("legal", "Are we allowed to store customer data outside the EU?"),
    ("legal", "The partner wants us to sign a confidentiality agreement."),
    ("legal", "Is the liability cap in this contract reasonable?"),
    ("legal", "What do our terms of service say about cancellations by the user?"),
    ("legal", "A customer asked us to delete all their personal data, what must we do?"),
    ("legal", "Can we use this photo from the internet in our marketing without permission?"),
]
"""35 requests, 7 per agent, none of them an example on a card."""
