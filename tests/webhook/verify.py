"""Verifies webhook deliveries with the Standard Webhooks project's own library (PyPI
`standardwebhooks`), not tickd's code: each line of stdin is one delivery as the test's
receiver recorded it, {"secret", "headers": {...}, "body"}. Prints how many were verified;
exits non-zero at the first one the library refuses, saying why."""

import json
import sys

from standardwebhooks.webhooks import Webhook


def main() -> int:
    verified = 0
    for number, line in enumerate(sys.stdin, start=1):
        delivery = json.loads(line)
        webhook = Webhook(delivery["secret"])
        try:
            payload = webhook.verify(delivery["body"], delivery["headers"])
        except Exception as error:  # the library raises its own WebhookVerificationError
            print(f"delivery {number} refused by standardwebhooks: {error!r}", file=sys.stderr)
            return 1
        if payload.get("tick_id") != delivery["headers"]["webhook-id"]:
            print(f"delivery {number}: tick_id differs from webhook-id", file=sys.stderr)
            return 1
        verified += 1
    print(json.dumps({"verified": verified}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
