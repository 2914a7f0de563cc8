// A yamz peer on zyre.js, an independent Zyre implementation, for spark_zmq's interop tests.
// Written from shared/protocols/yamz.md (the YAMZ header: the seed's tree, or the flat layout
// of the public yamz code) using zyre.js's and zeromq.js's public APIs only.
//
//   node yamz_node.js publish NAME IFACE BEACON_PORT LAYOUT PORT COUNT
//     binds an XPUB on IFACE's address at PORT, describes it in a YAMZ header (LAYOUT: tree or
//     flat), joins, and once a subscription arrives sends COUNT messages NAME/0 .. NAME/COUNT-1;
//     prints "sent COUNT" when done and stays until killed.
//   node yamz_node.js announce NAME IFACE BEACON_PORT PORT COUNT HEADER
//     as publish, with the YAMZ header the test gives (any JSON text: a layout of another
//     implementation, or one a hostile peer might send), in which @ENDPOINT@ stands for the
//     bound port's address.
//   node yamz_node.js subscribe NAME IFACE BEACON_PORT TARGET PATH COUNT LAYOUT
//     joins, waits for node TARGET, reads its YAMZ header as a parser of LAYOUT does (flat: only
//     `clients` and `idparms`, as the yamz C++ library; tree: only the seed's tree), connects a
//     SUB to the address of the port at PATH as announced (the yamz C++ library substitutes
//     nothing for a wildcard host) and prints each message as a JSON line
//     {"frames": [base64, ...]}; exits after COUNT messages.
'use strict';

const os = require('os');
const zmq = require('zeromq');
const Zyre = require('zyre.js');

const [mode, name, iface, beaconPort] = process.argv.slice(2, 6);
const rest = process.argv.slice(6);

function log(text) {
  process.stderr.write(`yamz_node ${name}: ${text}\n`);
}

// The interface's IPv4 address, once the test has given it one.
function addressOf(ifaceName) {
  const entries = os.networkInterfaces()[ifaceName] || [];
  const found = entries.find((e) => e.family === 'IPv4' || e.family === 4);
  return found ? found.address : undefined;
}

function waitForAddress(ifaceName, then) {
  const started = Date.now();
  const timer = setInterval(() => {
    const address = addressOf(ifaceName);
    if (address) {
      clearInterval(timer);
      then(address);
    } else if (Date.now() - started > 60000) {
      log(`no IPv4 address on ${ifaceName} within 60 s`);
      process.exit(2);
    }
  }, 100);
}

// The YAMZ header of one bound PUB-like port, in the layout the test asks for.
function header(layout, address) {
  if (layout === 'tree') {
    return {
      name,
      params: { site: 'lab' },
      children: [{ name: 'tps', params: { det: 'tpc' },
        children: [{ name: 'out', port: { address, type: 'PUB' }, params: { apa: '42' } }] }],
    };
  }
  return {
    clients: [{ clientid: 'tps', idparms: [{ key: 'det', val: 'tpc' }],
      ports: [{ addresses: [address], idparms: [{ key: 'apa', val: '42' }], portid: 'out',
        ztype: 'PUB' }] }],
    idparms: [{ key: 'site', val: 'lab' }],
  };
}

function publish(address, headerOf, port, count) {
  const sock = zmq.socket('xpub');
  const endpoint = `tcp://${address}:${port}`;
  sock.bindSync(endpoint);
  let sent = false;
  sock.on('message', (frame) => {
    log(`${frame[0] === 1 ? 'subscribed' : 'unsubscribed'} at ${new Date().toISOString()}`);
    if (sent || frame[0] !== 1) return;        // a subscription (first byte 1), once
    sent = true;
    for (let i = 0; i < count; i += 1) sock.send(Buffer.from(`${name}/${i}`));
    process.stdout.write(`sent ${count}\n`);
  });
  const yamz = headerOf(endpoint);
  const zyre = new Zyre({ name, iface, headers: { YAMZ: yamz }, bport: Number(beaconPort) });
  zyre.start().then(() => log(`joined as a publisher at ${endpoint}`));
}

// The concrete address of port PATH in a YAMZ header, read in one layout only.
function portAddress(yamz, path, layout) {
  const parts = path.split('/');
  if (layout === 'flat') {
    if (!Array.isArray(yamz.clients)) return undefined;
    const client = yamz.clients.find((c) => c.clientid === parts[0]);
    const port = client && client.ports.find((p) => p.portid === parts[1]);
    return port && port.addresses[0];
  }
  let vertex = yamz;
  for (const part of parts) {
    vertex = (vertex.children || []).find((child) => child.name === part);
    if (!vertex) return undefined;
  }
  return vertex.port && vertex.port.address;
}

function subscribe(target, path, count, layout) {
  const zyre = new Zyre({ name, iface, headers: { YAMZ: JSON.stringify({ name }) },
    bport: Number(beaconPort) });
  const sock = zmq.socket('sub');
  sock.subscribe('');
  let received = 0;
  sock.on('message', (...frames) => {
    process.stdout.write(`${JSON.stringify({ frames: frames.map((f) => f.toString('base64')) })}\n`);
    received += 1;
    if (received >= count) {
      sock.close();
      zyre.stop().then(() => process.exit(0));
    }
  });
  zyre.on('connect', (id, peerName, headers) => {
    if (peerName !== target) return;
    const address = portAddress(JSON.parse(headers.YAMZ), path, layout);
    if (!address) {
      log(`node ${target} has no port ${path} in the ${layout} layout of its YAMZ header`);
      process.exit(3);
    }
    // connected to as announced, as the yamz C++ library connects: a wildcard host
    // (tcp://0.0.0.0:port) would be this host
    log(`connecting to ${target}'s ${path} at ${address}`);
    sock.connect(address);
  });
  zyre.start().then(() => log(`joined, waiting for ${target}`));
}

waitForAddress(iface, (address) => {
  if (mode === 'publish') {
    const layout = rest[0];
    publish(address, (e) => JSON.stringify(header(layout, e)), Number(rest[1]), Number(rest[2]));
  } else if (mode === 'announce') {
    publish(address, (e) => rest[2].split('@ENDPOINT@').join(e), Number(rest[0]), Number(rest[1]));
  } else if (mode === 'subscribe') {
    subscribe(rest[0], rest[1], Number(rest[2]), rest[3]);
  } else {
    log(`unknown mode ${mode}`);
    process.exit(2);
  }
});
