#!/bin/bash
set -e
printf '#!/bin/bash\necho $(( $1 * $1 ))\n' > /app/square.sh
chmod +x /app/square.sh
